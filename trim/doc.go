// Package trim advances trim cursors, applies retention and reaps transit
// slots and superseded objects once their grace has passed (DESIGN.md
// section 4). Only this package deletes objects.
package trim
