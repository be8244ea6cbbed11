package pendingobj_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nova/auditor/pendingobj"
)

// The auditor's use (docs/format.md#pending-object-sidecar): stage part 1 of intent 7, then
// reconcile with the positions still referenced.
func Example() {
	dir, err := os.MkdirTemp("", "pending")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	s, err := pendingobj.New(dir, "star1", "nova-auditor-part/1")
	if err != nil {
		fmt.Println(err)
		return
	}
	position := uint64(7*10000 + 1)
	if err := s.Install(position, "settled/abc#1", "application/octet-stream", []byte("part bytes")); err != nil {
		fmt.Println(err)
		return
	}
	err = s.Install(position, "settled/abc#1", "application/octet-stream", []byte("again"))
	fmt.Println("second install exists:", errors.Is(err, fs.ErrExist))

	if err := s.Reconcile([]uint64{position}); err != nil {
		fmt.Println(err)
		return
	}
	obj, err := s.Read(position)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s %q\n", obj.FileName, obj.MediaType, obj.Bytes)

	_, err = s.Read(position + 1)
	fmt.Println("missing part not found:", errors.Is(err, fs.ErrNotExist))
	// Output:
	// second install exists: true
	// settled/abc#1 application/octet-stream "part bytes"
	// missing part not found: true
}
