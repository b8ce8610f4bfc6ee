//go:build !unix

package tlsfiles

// openFlags adds nothing where there are no FIFOs to wait on; the stat
// before the open still refuses whatever is not a regular file.
const openFlags = 0
