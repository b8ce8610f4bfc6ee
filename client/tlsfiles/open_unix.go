//go:build unix

package tlsfiles

import "syscall"

// openFlags opens a file without waiting: a FIFO put in a file's place
// would block a plain open until some writer came. What is opened is then
// checked to be a regular file, for which the flag changes nothing.
const openFlags = syscall.O_NONBLOCK
