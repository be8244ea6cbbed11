// Package objstore is the only place that talks to object storage. It defines
// the Store contract used by settle, trim and novasim, and implements it on S3
// (aws-sdk-go-v2, with server-side copy planning) and on a local directory
// (the file backend), plus the express bucket set. It knows nothing of the
// bundle format or the metastore.
package objstore
