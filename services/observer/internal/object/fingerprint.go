package object

import "hash/maphash"

// StatusOnly reports whether a change from old to cur left everything but
// the value's top-level "status" member as it was: both values decoded and
// their fingerprints are equal. A status-only change of a controller's own
// object is, for a controller that computes its status itself, nothing new
// (see rules.Rule.IgnoreOwnStatus). A missing or malformed value has no
// fingerprint and always counts as changed.
func StatusOnly(old, cur *Meta) bool {
	return old != nil && cur != nil && old.Fingerprint != 0 && old.Fingerprint == cur.Fingerprint
}

// seed keys the fingerprints. They are compared within one process only
// (the cached value with the next one), so a seed per process will do, and
// a secret one keeps a writer from crafting a change whose fingerprint
// equals the old value's, which would hide it from its controller.
var seed = maphash.MakeSeed()

// statusKey is the member fingerprint leaves out, as it appears in the
// value. A key written any other way (escaped, another case) is hashed:
// the change then counts as more than status, which only announces more.
const statusKey = `"status"`

// fingerprint hashes value, a JSON object json.Unmarshal accepted, without
// its top-level "status" member: the sum of a hash of each other member
// (`"key":value`), so the order of the members does not matter, with
// whitespace outside strings left out, so re-encoding a value compactly
// (as a controller's status write does) changes nothing. Anything else
// that differs (escapes, number forms, the order inside a member) counts
// as a change. It never returns 0, which means "no fingerprint".
func fingerprint(value []byte) uint64 {
	s := scanner{b: value}
	s.space()
	if s.peek() != '{' {
		return 0
	}
	s.i++
	var sum uint64
	for {
		s.space()
		switch s.peek() {
		case ',':
			s.i++
			continue
		case '"':
		default: // '}', or the end of a value json.Unmarshal would refuse
			return max(sum, 1)
		}
		start := s.i
		s.str()
		status := string(s.b[start:s.i]) == statusKey
		keyEnd := s.i
		s.space()
		if s.peek() != ':' {
			return 0
		}
		s.i++
		s.space()
		spaced := s.i != keyEnd+1
		spaced = s.value() || spaced
		switch member := s.b[start:s.i]; {
		case status:
		case spaced:
			sum += compactHash(member)
		default: // the common case: a compact encoding, hashed in one go
			sum += maphash.Bytes(seed, member)
		}
	}
}

// compactHash hashes member as maphash.Bytes would hash it without the
// whitespace outside its strings.
func compactHash(member []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	s := scanner{b: member}
	run := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.str()
		case isSpace(c):
			h.Write(s.b[run:s.i])
			s.space()
			run = s.i
		default:
			s.i++
		}
	}
	h.Write(s.b[run:])
	return h.Sum64()
}

// scanner walks a JSON document that is known to be valid; it never reads
// past its end, whatever the input.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// space skips whitespace.
func (s *scanner) space() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

// str skips the string that starts at s.i.
func (s *scanner) str() {
	b := s.b
	for i := s.i + 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++ // the escaped byte cannot end the string
		case '"':
			s.i = i + 1
			return
		}
	}
	s.i = len(b)
}

// value skips the value that starts at s.i and reports whether it holds
// whitespace outside its strings.
func (s *scanner) value() (spaced bool) {
	depth := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			s.str()
			if depth == 0 {
				return spaced
			}
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 { // the end of the enclosing object, after a scalar
				return spaced
			}
			depth--
			s.i++
			if depth == 0 {
				return spaced
			}
		case ',':
			if depth == 0 {
				return spaced
			}
			s.i++
		default:
			if !isSpace(c) {
				s.i++
				continue
			}
			if depth == 0 { // a scalar ended
				return spaced
			}
			spaced = true
			s.space()
		}
	}
	return spaced
}
