// Package backup is the queue's backup file: every queue and key of a
// queue as it was at one moment, written by `batonctl queue snapshot save`
// from the leader and read by `baton-queue restore`, which seeds a new
// queue from it.
//
// # Format
//
//	header   "BTNBAK" and the version as two digits (format.Backup)
//	frames   each: length uint32 big-endian, CRC-32C (Castagnoli) of the
//	         payload uint32 big-endian, payload: records (package record)
//	         back to back, Queue records before the Put records of their
//	         queue
//	footer   "BTNBAKEN", the number of records as uint64 big-endian, and
//	         the CRC-32C of every byte before the footer as uint32
//	         big-endian
//
// A file is read whole before anything is made of it: a header of a
// version this build does not read is format's ErrNewer or ErrOlder, and a
// file cut short (no footer), a frame whose checksum fails, a record that
// does not decode, a count or a whole-file checksum that differs is
// ErrDamaged, naming the file and the offset. Nothing of a damaged file is
// restored.
package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
)

const (
	kind        = "BTNBAK"
	footerMagic = "BTNBAKEN"
	frameHeader = 8
	footerLen   = len(footerMagic) + 8 + 4
	// maxFrame is how many bytes of records a frame holds at most.
	maxFrame = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged is returned for a backup file that is cut short or whose
// bytes do not check out.
var ErrDamaged = errors.New("backup: damaged")

// Writer writes a backup file to w: Add the records, then Close.
type Writer struct {
	w            io.Writer
	crc          uint32
	buf          []byte // the frame being filled
	count        uint64
	queues, keys int
	err          error
}

// NewWriter starts a backup file on w with its header.
func NewWriter(w io.Writer) *Writer {
	bw := &Writer{w: w}
	bw.write(format.Header(kind, format.Backup.Current))
	return bw
}

func (bw *Writer) write(b []byte) {
	if bw.err != nil {
		return
	}
	bw.crc = crc32.Update(bw.crc, castagnoli, b)
	_, bw.err = bw.w.Write(b)
}

// Add appends one record.
func (bw *Writer) Add(r *record.Record) error {
	bw.buf = record.Append(bw.buf, r)
	bw.count++
	if r.Kind == record.KindQueue {
		bw.queues++
	} else {
		bw.keys++
	}
	if len(bw.buf) >= maxFrame {
		bw.flush()
	}
	return bw.err
}

// AddEncoded appends records already encoded (record.Append's), back to
// back.
func (bw *Writer) AddEncoded(recs []byte) error {
	for off := 0; off < len(recs); {
		r, n, err := record.Decode(recs[off:])
		if err != nil {
			return fmt.Errorf("backup: a record to write does not decode: %w", err)
		}
		bw.buf = append(bw.buf, recs[off:off+n]...)
		bw.count++
		if r.Kind == record.KindQueue {
			bw.queues++
		} else {
			bw.keys++
		}
		off += n
		if len(bw.buf) >= maxFrame {
			bw.flush()
		}
	}
	return bw.err
}

// Info is what the file written holds, once Close has returned nil.
func (bw *Writer) Info() Info {
	return Info{Version: format.Backup.Current, Records: bw.count, Queues: bw.queues, Keys: bw.keys, Checksum: bw.crc}
}

func (bw *Writer) flush() {
	if len(bw.buf) == 0 {
		return
	}
	var h [frameHeader]byte
	binary.BigEndian.PutUint32(h[0:], uint32(len(bw.buf)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(bw.buf, castagnoli))
	bw.write(h[:])
	bw.write(bw.buf)
	bw.buf = bw.buf[:0]
}

// Close writes the last frame and the footer. It does not close w.
func (bw *Writer) Close() error {
	bw.flush()
	if bw.err != nil {
		return bw.err
	}
	f := make([]byte, 0, footerLen)
	f = append(f, footerMagic...)
	f = binary.BigEndian.AppendUint64(f, bw.count)
	f = binary.BigEndian.AppendUint32(f, bw.crc)
	_, bw.err = bw.w.Write(f) // not write: the checksum covers what comes before
	return bw.err
}

// Info describes a backup file that checked out.
type Info struct {
	Version format.Version
	Records uint64
	Queues  int
	Keys    int
	// Checksum is the CRC-32C of the file before its footer: what names
	// this backup (a restore derives the new queue's cluster id from it).
	Checksum uint32
}

// Read checks the whole of b, a backup file called name, and returns what
// it holds; only then is each record handed to fn, in file order (fn may be
// nil): a damaged file hands on nothing.
func Read(name string, b []byte, fn func(*record.Record) error) (Info, error) {
	info, err := read(name, b, nil)
	if err != nil || fn == nil {
		return info, err
	}
	return read(name, b, fn)
}

// read is one pass of Read.
func read(name string, b []byte, fn func(*record.Record) error) (Info, error) {
	damaged := func(off int, why string, args ...any) error {
		return fmt.Errorf("%w: %s at offset %d: %s", ErrDamaged, name, off, fmt.Sprintf(why, args...))
	}
	v, err := format.ParseHeader(b, kind, format.Backup)
	switch {
	case errors.Is(err, format.ErrNotHeader):
		return Info{}, damaged(0, "not a backup file (no %q header)", kind)
	case err != nil:
		return Info{}, fmt.Errorf("backup: %s: %w", name, err)
	}
	if len(b) < format.HeaderLen+footerLen || !bytes.Equal(b[len(b)-footerLen:len(b)-footerLen+len(footerMagic)], []byte(footerMagic)) {
		return Info{}, damaged(len(b), "cut short: the file does not end with its footer")
	}
	body, foot := b[:len(b)-footerLen], b[len(b)-footerLen+len(footerMagic):]
	info := Info{Version: v, Records: binary.BigEndian.Uint64(foot), Checksum: binary.BigEndian.Uint32(foot[8:])}
	if got := crc32.Checksum(body, castagnoli); got != info.Checksum {
		return Info{}, damaged(len(body), "the file's checksum %08x is not the footer's %08x", got, info.Checksum)
	}
	var count uint64
	for off := format.HeaderLen; off < len(body); {
		if len(body)-off < frameHeader {
			return Info{}, damaged(off, "a frame header cut short")
		}
		n := int(binary.BigEndian.Uint32(body[off:]))
		sum := binary.BigEndian.Uint32(body[off+4:])
		if n > len(body)-off-frameHeader {
			return Info{}, damaged(off, "a frame of %d bytes runs past the end", n)
		}
		payload := body[off+frameHeader : off+frameHeader+n]
		if crc32.Checksum(payload, castagnoli) != sum {
			return Info{}, damaged(off, "a frame's checksum fails")
		}
		for p := 0; p < len(payload); {
			r, k, err := record.Decode(payload[p:])
			if err != nil {
				return Info{}, damaged(off+frameHeader+p, "a record does not decode: %v", err)
			}
			p += k
			count++
			if r.Kind == record.KindQueue {
				info.Queues++
			} else {
				info.Keys++
			}
			if fn != nil {
				if err := fn(&r); err != nil {
					return Info{}, err
				}
			}
		}
		off += frameHeader + n
	}
	if count != info.Records {
		return Info{}, damaged(len(body), "%d records, the footer says %d", count, info.Records)
	}
	return info, nil
}
