// Package memtrim hands memory that only start-up needed back to the kernel,
// for the daemon's long-lived processes.
//
// Every process of the reeve binary runs the package initialisation of all
// it links (the control plane, SQLite, PostgreSQL's driver, the agents), and
// the kernel maps the executable's pages in 64 KiB runs around each page
// touched. Once the daemon idles, most of those mapped pages are never used
// again, yet they count in its resident size: about two thirds of an idle
// supervisor and worker was the executable's read-only pages, not heap.
package memtrim

import "runtime/debug"

// AfterStartup returns the heap's free pages to the kernel and unmaps the
// executable's clean read-only pages (code, read-only data, the function
// tables), which fault back in from the page cache, without I/O, when they
// are used again. It never touches a page the process has written: that
// would lose the write.
func AfterStartup() {
	debug.FreeOSMemory()
	dropExecutablePages()
}
