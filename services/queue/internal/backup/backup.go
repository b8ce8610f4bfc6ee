// Package backup is the queue's backup file: every queue and key of a
// queue as it was at one moment, written by `batonctl queue snapshot save`
// from the leader and read by `baton-queue restore`, which seeds a new
// queue from it.
//
// # Format
//
//	header   "BTNBAK" and the version as two digits (format.Backup)
//	fence    from version 2: the token epoch and the highest fencing
//	         token the queue could have issued when the backup was taken
//	         (Fence), each uint64 big-endian
//	frames   each: length uint32 big-endian, CRC-32C (Castagnoli) of the
//	         payload uint32 big-endian, payload: records (package record)
//	         back to back, Queue records before the Put records of their
//	         queue
//	footer   "BTNBAKEN", the number of records as uint64 big-endian, and
//	         the CRC-32C of every byte before the footer as uint32
//	         big-endian
//
// A frame holds at most MaxFrame bytes, so the footer's magic, read where
// a frame's header would be, is a length no frame has: a reader tells the
// two apart without knowing the file's size, and reads a file from a pipe
// in one pass with a frame's worth of memory (Stream). The header comes
// first and is checked before anything else is read: a file that is not a
// backup (/dev/zero, a log segment) is refused at its first bytes.
//
// A header of a version this build does not read is format's ErrNewer or
// ErrOlder, and a file cut short (no footer), a frame whose checksum
// fails, a record that does not decode, a count or a whole-file checksum
// that differs is ErrDamaged, naming the file and the offset. Nothing of a
// damaged file is restored: Read checks the whole file before it hands on
// a record, and a restore that streams stages what it reads until the
// footer has checked out.
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
	fenceLen    = 16
	// maxFrame is how many bytes of records the Writer puts in a frame
	// before it starts the next: a frame ends with the record that
	// reaches it.
	maxFrame = 1 << 20
	// MaxFrame is how many bytes a frame may hold: maxFrame and the
	// largest record past it, with room. Far below the footer's magic
	// read as a length (0x42544e42).
	MaxFrame = 4 << 20
	// MaxFileBytes bounds a backup file a reader takes: some tens of
	// millions of keys, far past what one queue holds in memory.
	MaxFileBytes = 16 << 30
)

// Fence is what the queue a backup was taken from could have issued by
// then: its token epoch (a replicated leader's term, a single member's
// run epoch; the top bits of every token) and the highest token it had
// handed out. Every token of that queue up to the backup is at most
// Token, and has an epoch of at most Epoch; a queue restored from the
// backup hands out tokens of a higher epoch only, so that an Ack of a
// lease from before the backup is refused.
type Fence struct {
	Epoch uint64
	Token uint64
}

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
	version      format.Version
	records      format.Version // the version of its records
	fence        Fence
	err          error
}

// NewWriter starts a backup file of version v (the queue's level's,
// format.Backup.Writes, so that a restore of that level reads it) on w
// with its header and, from version 2, the fence.
func NewWriter(w io.Writer, v format.Version, f Fence) *Writer {
	if format.Backup.Check(v) != nil {
		panic(fmt.Sprintf("backup: no version %d to write", v))
	}
	bw := &Writer{w: w, version: v, records: format.Backup.RecordsAt(v)}
	bw.write(format.Header(kind, v))
	if v >= 2 {
		bw.fence = f
		var fb [fenceLen]byte
		binary.BigEndian.PutUint64(fb[0:], f.Epoch)
		binary.BigEndian.PutUint64(fb[8:], f.Token)
		bw.write(fb[:])
	}
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
	bw.buf = record.Append(bw.buf, r, bw.records)
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

// Info is what the file written holds, once Close has returned nil.
func (bw *Writer) Info() Info {
	return Info{Version: bw.version, Records: bw.count, Queues: bw.queues, Keys: bw.keys, Checksum: bw.crc, Fence: bw.fence, Fenced: bw.version >= 2}
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
	// Checksum is the CRC-32C of the file before its footer.
	Checksum uint32
	// Fence is the file's; Fenced is false for a file of version 1,
	// which did not record one.
	Fence  Fence
	Fenced bool
}

// Read checks the whole of b, a backup file called name, and returns what
// it holds; only then is each record handed to fn, in file order (fn may be
// nil): a damaged file hands on nothing.
func Read(name string, b []byte, fn func(*record.Record) error) (Info, error) {
	info, err := Stream(name, bytes.NewReader(b), nil)
	if err != nil || fn == nil {
		return info, err
	}
	return Stream(name, bytes.NewReader(b), fn)
}

// Stream reads a backup file called name from r in one pass, with a
// frame's worth of memory: the header first (refused before anything
// else is read), then each frame, handing its records to fn (which may be
// nil) as they come, and the footer, checked against everything before
// it. Unlike Read, records reach fn before the whole file has checked
// out: a caller that must make nothing of a damaged file stages what fn
// is given until Stream returns nil. At most MaxFileBytes are read.
func Stream(name string, r io.Reader, fn func(*record.Record) error) (Info, error) {
	return newStreamReader(name, r, MaxFileBytes).read(fn)
}

func newStreamReader(name string, r io.Reader, max int64) *streamReader {
	return &streamReader{name: name, r: io.LimitReader(r, max+1), max: max}
}

// streamReader is one Stream: where it is in the file and the checksum
// of what it has read before the footer.
type streamReader struct {
	name string
	r    io.Reader
	max  int64 // MaxFileBytes, but in tests
	off  int64
	crc  uint32
}

func (sr *streamReader) damaged(off int64, why string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d: %s", ErrDamaged, sr.name, off, fmt.Sprintf(why, args...))
}

// full reads len(b) bytes into b, counting them into the checksum if sum:
// a file that ends first is cut short.
func (sr *streamReader) full(b []byte, sum bool, what string) error {
	n, err := io.ReadFull(sr.r, b)
	if sum {
		sr.crc = crc32.Update(sr.crc, castagnoli, b[:n])
	}
	sr.off += int64(n)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if sr.off > sr.max {
			return sr.tooLarge()
		}
		return sr.damaged(sr.off, "cut short: the file ends inside %s, before its footer", what)
	default:
		return fmt.Errorf("backup: read %s: %w", sr.name, err)
	}
	if sr.off > sr.max {
		return sr.tooLarge()
	}
	return nil
}

// ErrTooLarge is returned for a file of more than MaxFileBytes.
var ErrTooLarge = errors.New("backup: too large")

func (sr *streamReader) tooLarge() error {
	return fmt.Errorf("%w: %s holds over the %d bytes a backup may be", ErrTooLarge, sr.name, sr.max)
}

func (sr *streamReader) read(fn func(*record.Record) error) (Info, error) {
	var h [format.HeaderLen]byte
	n, err := io.ReadFull(sr.r, h[:])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return Info{}, fmt.Errorf("backup: read %s: %w", sr.name, err)
	}
	sr.off, sr.crc = int64(n), crc32.Update(0, castagnoli, h[:n])
	v, err := header(sr.name, h[:n])
	if err != nil {
		return Info{}, err
	}
	info := Info{Version: v}
	records := format.Backup.RecordsAt(v) // what this file's records are
	if v >= 2 {
		var fb [fenceLen]byte
		if err := sr.full(fb[:], true, "its fence"); err != nil {
			return Info{}, err
		}
		info.Fence = Fence{Epoch: binary.BigEndian.Uint64(fb[0:]), Token: binary.BigEndian.Uint64(fb[8:])}
		info.Fenced = true
	}
	var (
		count   uint64
		payload []byte
		fh      [frameHeader]byte
	)
	for {
		at := sr.off
		before := sr.crc // the footer's magic is not covered by the checksum
		if err := sr.full(fh[:], true, "a frame header"); err != nil {
			return Info{}, err
		}
		if string(fh[:]) == footerMagic {
			sr.crc = before
			return sr.footer(info, count, at)
		}
		n := binary.BigEndian.Uint32(fh[0:])
		switch {
		case n > MaxFrame:
			return Info{}, sr.damaged(at, "a frame of %d bytes, over the %d a frame holds", n, MaxFrame)
		case n == 0:
			// Never written, and what a run of zeros after a header reads
			// as: without this, /dev/zero behind a header would be read
			// to the end of MaxFileBytes.
			return Info{}, sr.damaged(at, "an empty frame")
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if err := sr.full(payload, true, "a frame"); err != nil {
			return Info{}, err
		}
		if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(fh[4:]) {
			return Info{}, sr.damaged(at, "a frame's checksum fails")
		}
		for p := 0; p < len(payload); {
			r, k, err := record.Decode(payload[p:], records)
			if err != nil {
				return Info{}, sr.damaged(at+frameHeader+int64(p), "a record does not decode: %v", err)
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
	}
}

// CheckHeader checks that b, the first bytes of a file called name, begin
// a backup this build reads, as Stream does before anything else: for a
// caller that must refuse what is no backup before it makes anything.
func CheckHeader(name string, b []byte) error {
	_, err := header(name, b)
	return err
}

func header(name string, b []byte) (format.Version, error) {
	v, err := format.ParseHeader(b, kind, format.Backup)
	switch {
	case errors.Is(err, format.ErrNotHeader):
		return 0, fmt.Errorf("%w: %s at offset 0: not a backup file (no %q header)", ErrDamaged, name, kind)
	case err != nil:
		return 0, fmt.Errorf("backup: %s: %w", name, err)
	}
	return v, nil
}

// footer reads the rest of the footer that begins at at, checks it
// against what was read, and that nothing follows it.
func (sr *streamReader) footer(info Info, count uint64, at int64) (Info, error) {
	var f [footerLen - len(footerMagic)]byte
	if err := sr.full(f[:], false, "its footer"); err != nil {
		return Info{}, err
	}
	info.Records, info.Checksum = binary.BigEndian.Uint64(f[0:]), binary.BigEndian.Uint32(f[8:])
	if sr.crc != info.Checksum {
		return Info{}, sr.damaged(at, "the file's checksum %08x is not the footer's %08x", sr.crc, info.Checksum)
	}
	if count != info.Records {
		return Info{}, sr.damaged(at, "%d records, the footer says %d", count, info.Records)
	}
	var one [1]byte
	if n, _ := io.ReadFull(sr.r, one[:]); n != 0 {
		return Info{}, sr.damaged(sr.off, "bytes after the footer")
	}
	return info, nil
}
