package docschema

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxFileSize bounds a document read by ReadFile. Governance and config
// files are a few kilobytes; the bound keeps a hostile or mistaken file
// (a symbolic link to /dev/zero, a log renamed policy.yaml) from taking
// the memory of the process that reads it.
const MaxFileSize = 1 << 20

// ErrNotRegular is a document path that names something other than a
// regular file, after symbolic links: a device, a FIFO, a directory.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is a document over MaxFileSize.
var ErrTooLarge = fmt.Errorf("larger than %d bytes", MaxFileSize)

// ReadFile reads a document: only a regular file (symbolic links are
// followed, but a device or FIFO at the end is refused before a byte is
// read), and at most MaxFileSize bytes. A missing file is an error wrapping
// fs.ErrNotExist, as with os.ReadFile.
func ReadFile(path string) ([]byte, error) {
	// O_NONBLOCK keeps the open itself from waiting on a FIFO with no
	// writer; the mode check below refuses it anyway.
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: %w (%d bytes)", path, ErrTooLarge, fi.Size())
	}
	// The file may grow between Stat and Read: read one byte past the bound.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	return data, nil
}
