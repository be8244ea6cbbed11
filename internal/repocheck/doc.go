// Package repocheck holds tests about the repository as a whole: no
// comment points outside it (a fresh clone has only docs/), every docs/
// anchor a comment names exists, and the import graph points one way.
// It has no code of its own.
package repocheck
