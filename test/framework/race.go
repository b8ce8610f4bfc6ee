//go:build race

package framework

// raceEnabled reports whether this test binary was built with -race; the
// binaries it builds follow.
const raceEnabled = true
