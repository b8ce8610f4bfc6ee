// Package record encodes the queue's durable facts: one record states the
// whole stored state of one key (or that the key is gone), so replaying
// records in log order always ends in the state of the last one, whatever
// came before. That property is what lets the store take snapshots while the
// queue keeps serving (see ../store/doc.go).
//
// Version 1 of a record (format.Records), the only one so far, is a kind
// byte followed by fields, with varint integers and
// uvarint-length-prefixed strings:
//
//	Put:    'P' queue key state priority attempts not_before pending_since last_error
//	Delete: 'D' queue key
//	Queue:  'Q' queue            (the queue exists, even when empty)
//
// state is 2 (pending), 3 (delayed) or 5 (parked), the values of
// baton.queue.v1.ItemState; priority is 1 (normal), 2 (low) or 3 (high);
// not_before and pending_since are Unix nanoseconds.
//
// # Limits
//
// Every string has the limit of its field in baton.queue.v1 (package
// github.com/batonrun/baton/client/queue), the same limit the API checks: a
// value the API accepts always decodes. The decoder refuses a longer queue
// name or key as corruption. The one exception is last_error: a record
// written before error texts were cut at the API may hold a longer one, or
// bytes that are not UTF-8 (either made such a log unreadable once), so the
// decoder takes any error text that fits its frame and cuts it as the API
// would.
package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/services/queue/internal/field"
	"github.com/batonrun/baton/services/queue/internal/format"
)

// Kind tells what a record states.
type Kind byte

// Kinds of record.
const (
	KindPut    Kind = 'P'
	KindDelete Kind = 'D'
	KindQueue  Kind = 'Q'
)

// States a Put may store (leases are never stored).
const (
	StatePending uint8 = 2
	StateDelayed uint8 = 3
	StateParked  uint8 = 5
)

// Record is one decoded record. Strings alias nothing: decoding copies.
type Record struct {
	Kind         Kind
	Queue        string
	Key          string
	State        uint8
	Priority     uint8
	Attempts     uint32
	NotBefore    int64
	PendingSince int64
	LastError    string
}

// ErrCorrupt is returned when bytes do not decode as a record.
var ErrCorrupt = errors.New("record: corrupt")

// Append appends the encoding of r at version v (format.Records: the
// version its container holds, format.Format.RecordsAt) to dst. A version
// this build does not write is the caller's mistake, and panics.
func Append(dst []byte, r *Record, v format.Version) []byte {
	if v != 1 {
		panic(fmt.Sprintf("record: no encoding of version %d", v))
	}
	dst = append(dst, byte(r.Kind))
	dst = field.AppendString(dst, r.Queue)
	if r.Kind == KindQueue {
		return dst
	}
	dst = field.AppendString(dst, r.Key)
	if r.Kind == KindDelete {
		return dst
	}
	dst = append(dst, r.State, r.Priority)
	dst = binary.AppendUvarint(dst, uint64(r.Attempts))
	dst = binary.AppendVarint(dst, r.NotBefore)
	dst = binary.AppendVarint(dst, r.PendingSince)
	// Cut here too, so that no path past the API can write what a decoder
	// would have to cut (the API's text is already within the limit).
	return field.AppendString(dst, limits.ErrorText(r.LastError))
}

// Decode decodes one record of version v (its container's,
// format.Format.RecordsAt) from the front of src and returns it with the
// number of bytes it used. A version this build does not read is
// format.Records' Check error, not corruption.
func Decode(src []byte, v format.Version) (Record, int, error) { return decode(src, v, nil) }

// Names interns queue names while decoding a log: a million records of one
// queue then share one string instead of allocating a million copies.
type Names map[string]string

// Decode is the package's Decode, with queue names interned in n.
func (n Names) Decode(src []byte, v format.Version) (Record, int, error) { return decode(src, v, n) }

func decode(src []byte, v format.Version, names Names) (Record, int, error) {
	var r Record
	if err := format.Records.Check(v); err != nil {
		return r, 0, fmt.Errorf("record: %w", err)
	}
	d := decoder{Reader: field.NewReader(src, ErrCorrupt), names: names}
	if len(src) == 0 {
		return r, 0, fmt.Errorf("%w: empty", ErrCorrupt)
	}
	r.Kind = Kind(d.Byte())
	switch r.Kind {
	case KindPut, KindDelete, KindQueue:
	default:
		return r, 0, fmt.Errorf("%w: unknown kind %#x", ErrCorrupt, byte(r.Kind))
	}
	r.Queue = d.name()
	if r.Kind != KindQueue {
		r.Key = d.String(limits.MaxKeyBytes, nil)
	}
	if r.Kind == KindPut {
		r.State = d.Byte()
		r.Priority = d.Byte()
		a := d.Uvarint()
		if a > 1<<32-1 {
			d.Fail("attempts out of range")
		}
		r.Attempts = uint32(a)
		r.NotBefore = d.Varint()
		r.PendingSince = d.Varint()
		r.LastError = d.text()
		if d.Err() == nil {
			switch {
			case r.State != StatePending && r.State != StateDelayed && r.State != StateParked:
				d.Fail(fmt.Sprintf("bad state %d", r.State))
			case r.Priority < 1 || r.Priority > 3:
				d.Fail(fmt.Sprintf("bad priority %d", r.Priority))
			}
		}
	}
	if d.Err() == nil && (r.Queue == "" || (r.Kind != KindQueue && r.Key == "")) {
		d.Fail("empty name")
	}
	if d.Err() != nil {
		return Record{}, 0, d.Err()
	}
	return r, d.Off(), nil
}

// decoder is a record's field.Reader, with the queue names to intern.
type decoder struct {
	field.Reader
	names Names
}

// name decodes a queue name, interned when the decoder has Names.
func (d *decoder) name() string {
	return d.String(limits.MaxQueueNameBytes, d.names)
}

// text decodes an error text: any length that fits the record, cut to the
// API's limit (see the package doc).
func (d *decoder) text() string {
	s := d.Bytes(math.MaxInt)
	if len(s) <= limits.MaxErrorBytes && utf8.Valid(s) {
		return string(s)
	}
	return limits.ErrorText(string(s))
}
