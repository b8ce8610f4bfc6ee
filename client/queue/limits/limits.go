// Package limits is the one place the limits of baton.queue.v1 live: the
// limit of every field, in one table, with the checks that apply them. The
// queue server checks every request with these functions before it changes
// anything, its write-ahead log encodes and decodes with the same limits
// (so whatever the API accepts the log can replay after a restart), and
// the Go client (package queue) splits its calls by them.
//
//	field                                   limit
//	queue name                              a DNS label: [a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?
//	key                                     1 to MaxKeyBytes (1024) bytes of UTF-8
//	keys of an Add or Forget                1 to MaxBatch (10,000)
//	acks of an Ack, leases of an Extend     1 to MaxBatch
//	max_items (Lease), page_size (List)     0 to MaxBatch (0 means 1, or 100 for a page)
//	worker (Lease), source (Add)            UTF-8, at most MaxNameBytes (256) bytes
//	error of a failure or terminal ack      any text; stored as valid UTF-8 of at most
//	                                        MaxErrorBytes (4096) bytes, cut and marked
//	                                        "[truncated from N bytes]" when longer
//	delay (Add), requeue_after (Ack)        0 to MaxDelay (365 days)
//	lease_duration (Lease, Extend)          0 to MaxLease (10 minutes); 0 means the default
//	wait (Lease)                            0 to MaxWait (30 s)
//	page_token (List)                       only what List issued
//	member name (ClusterService, --name)    1 to MaxMemberNameBytes (253) bytes of letters,
//	                                        digits, '.', '-' and '_' (a host name qualifies)
//	peer_addr, client_addr (MemberAdd),     host:port: an IP address or host name that is
//	--advertise-addr                        not a wildcard, a port from 1 to 65535; at most
//	                                        MaxAddrBytes (261) bytes
//	a whole request                         the server's --max-request-bytes
//	                                        (DefaultMaxRequestBytes, 1.5 MiB, as etcd's)
//
// A request outside a limit is refused whole with INVALID_ARGUMENT naming the
// field and the limit (a request over the size limit with RESOURCE_EXHAUSTED,
// by gRPC itself), and nothing is stored. The error text of an ack is the one
// field that is cut rather than refused: a worker reporting a long stack trace
// must still be able to hand its key back.
package limits

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The limits of baton.queue.v1 (see the package doc's table).
const (
	// MaxQueueNameBytes is the longest queue name (a DNS label).
	MaxQueueNameBytes = 63
	// MaxKeyBytes is the longest key.
	MaxKeyBytes = 1024
	// MaxBatch is the most keys, acks or leases in one call, and the largest
	// max_items and page_size.
	MaxBatch = 10000
	// MaxNameBytes is the longest worker name (Lease) and source (Add).
	MaxNameBytes = 256
	// MaxErrorBytes is the longest stored error text; longer text is cut.
	MaxErrorBytes = 4096
	// MaxDelay is the longest delay of an Add and requeue_after of an Ack.
	// Timestamps are Unix nanoseconds, which run out in 2262: without a cap
	// a delay of a few centuries wraps around into the past.
	MaxDelay = 365 * 24 * time.Hour
	// MaxLease is the longest lease.
	MaxLease = 10 * time.Minute
	// DefaultLease is the lease length when a request gives none (the
	// server's --default-lease may set another).
	DefaultLease = 30 * time.Second
	// MaxWait is the longest long-poll of a Lease.
	MaxWait = 30 * time.Second
	// DefaultPageSize is the page size of a List that gives none.
	DefaultPageSize = 100
	// MaxPageTokenBytes bounds a page token: List issues the base64 of a key.
	MaxPageTokenBytes = (MaxKeyBytes*8 + 5) / 6
	// DefaultMaxRequestBytes is the default of the server's
	// --max-request-bytes: etcd's default for its own requests. A request
	// of MaxBatch keys of MaxKeyBytes each does not fit; clients split by
	// bytes as well as by count.
	DefaultMaxRequestBytes = 1536 << 10
	// MaxResponseBytes bounds the answer of a Lease or a List page: gRPC
	// clients refuse messages over 4 MiB by default, and a Lease whose answer
	// a client cannot read would leave its keys leased to nobody.
	MaxResponseBytes = 4<<20 - 64<<10
	// MaxMemberNameBytes is the longest member name: a full host name's
	// 253, since a member's name defaults to its host name.
	MaxMemberNameBytes = 253
	// MaxAddrBytes is the longest member address: a host of
	// MaxMemberNameBytes, an IPv6 literal's brackets, a colon and a port.
	MaxAddrBytes = MaxMemberNameBytes + len("[]:65535")
)

// ErrInvalid is wrapped by every error of this package's checks.
var ErrInvalid = errors.New("invalid argument")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ValidQueueName reports whether name is a DNS label,
// ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$. Every call checks its queue, so this
// is a loop over bytes rather than a regular expression.
func ValidQueueName(name string) bool {
	if len(name) == 0 || len(name) > MaxQueueNameBytes || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// CheckQueueName returns an error unless name is a DNS label.
func CheckQueueName(name string) error {
	if !ValidQueueName(name) {
		return invalid("queue %q is not a DNS label ([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)", clip(name))
	}
	return nil
}

// ValidKey reports whether k may be a key: 1 to MaxKeyBytes bytes of UTF-8.
func ValidKey(k string) bool {
	return k != "" && len(k) <= MaxKeyBytes && utf8.ValidString(k)
}

// CheckKey returns an error naming field (e.g. "keys[3]") unless k is a
// valid key.
func CheckKey(field, k string) error {
	switch {
	case k == "":
		return invalid("%s is empty", field)
	case len(k) > MaxKeyBytes:
		return invalid("%s is %d bytes, over %d", field, len(k), MaxKeyBytes)
	case !utf8.ValidString(k):
		return invalid("%s is not UTF-8", field)
	}
	return nil
}

// CheckCount returns an error naming field unless n is in [min, MaxBatch]:
// a length, or a count a request carries (max_items, page_size,
// max_in_flight), which the error quotes as it was sent.
func CheckCount[N int | uint32](field string, n N, min int) error {
	v := int64(n)
	switch {
	case v < int64(min) && min == 1:
		return invalid("%s is empty: give 1 to %d", field, MaxBatch)
	case v < int64(min):
		return invalid("%s has %d, fewer than %d", field, v, min)
	case v > MaxBatch:
		return invalid("%s has %d, over %d in one call", field, v, MaxBatch)
	}
	return nil
}

// CheckName returns an error naming field unless s is UTF-8 of at most
// MaxNameBytes: the worker of a Lease, the source of an Add. They are shown
// to operators, and clients in other languages refuse strings that are not
// UTF-8.
func CheckName(field, s string) error {
	switch {
	case len(s) > MaxNameBytes:
		return invalid("%s is %d bytes, over %d", field, len(s), MaxNameBytes)
	case !utf8.ValidString(s):
		return invalid("%s is not UTF-8", field)
	}
	return nil
}

// CheckDuration returns an error naming field unless d is in [0, max].
func CheckDuration(field string, d, max time.Duration) error {
	switch {
	case d < 0:
		return invalid("%s is negative (%v)", field, d)
	case d > max:
		return invalid("%s %v is over the limit of %v", field, d, max)
	}
	return nil
}

// nameByte reports whether c may be in a member name or a host name:
// ASCII letters, digits, '.', '-' and '_'. Every host name qualifies; '='
// and ',', which separate the entries of --initial-cluster, and spaces,
// which would break a table, do not.
func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
}

// CheckMemberName returns an error naming field unless name may name a
// queue member (ClusterService, --name): 1 to MaxMemberNameBytes bytes of
// letters, digits, '.', '-' and '_'.
func CheckMemberName(field, name string) error {
	switch {
	case name == "":
		return invalid("%s is empty: give a member name (letters, digits, '.', '-', '_')", field)
	case len(name) > MaxMemberNameBytes:
		return invalid("%s is %d bytes, over %d", field, len(name), MaxMemberNameBytes)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return invalid("%s %q has %q at byte %d: a member name is letters, digits, '.', '-' and '_'", field, clip(name), name[i:i+1], i)
		}
	}
	return nil
}

// CheckAddr returns an error naming field unless addr is an address another
// process can dial: host:port, the host an IP address or a host name that is
// not a wildcard (0.0.0.0 and :: are where a process listens, not where it
// is reached), the port a number from 1 to 65535, at most MaxAddrBytes.
func CheckAddr(field, addr string) error {
	if addr == "" {
		return invalid("%s is empty: give host:port", field)
	}
	if len(addr) > MaxAddrBytes {
		return invalid("%s is %d bytes, over %d", field, len(addr), MaxAddrBytes)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return invalid("%s %q is not host:port", field, clip(addr))
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return invalid("%s %q: port %q is not a number from 1 to 65535", field, clip(addr), port)
	}
	if host == "" {
		return invalid("%s %q has no host: give the host others dial", field, clip(addr))
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsUnspecified() {
			return invalid("%s %q has the wildcard host %s, where a process listens: give the host others dial", field, clip(addr), host)
		}
		return nil
	}
	for i := 0; i < len(host); i++ {
		if !nameByte(host[i]) {
			return invalid("%s %q: host %q is neither an IP address nor a host name", field, clip(addr), clip(host))
		}
	}
	return nil
}

// ErrorText returns the error text to store for s: s itself when it is
// UTF-8 of at most MaxErrorBytes; otherwise s with each run of bytes that are
// not UTF-8 replaced by U+FFFD and, if still too long, cut at a character
// boundary and ended with " … [truncated from N bytes]", N being len(s). The
// result is never longer than MaxErrorBytes.
func ErrorText(s string) string {
	if len(s) <= MaxErrorBytes && utf8.ValidString(s) {
		return s
	}
	t := strings.ToValidUTF8(s, "\uFFFD")
	if len(t) <= MaxErrorBytes {
		return t
	}
	suffix := fmt.Sprintf(" … [truncated from %d bytes]", len(s))
	cut := MaxErrorBytes - len(suffix)
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut--
	}
	return t[:cut] + suffix
}

// clip shortens a value quoted in an error message, so that refusing a
// megabyte of garbage does not echo it back.
func clip(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
