package checkpoint

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ChunkBytes is the most bytes of one chunk value.
const ChunkBytes = 256 << 10

// MaxKeyBytes bounds one key when decoding (etcd's own limit on a key is
// the request size, 1.5 MiB; a Kubernetes key is a few hundred bytes).
const MaxKeyBytes = 64 << 10

// ErrCorrupt is returned when a record does not decode: a chunk is
// missing, its checksum or a count does not match, or the stream is cut.
var ErrCorrupt = errors.New("checkpoint: known-key record is corrupt")

// encoder front-codes and gzips keys, reusing its compressor: a record
// of a thousand prefixes encodes a thousand times, and a gzip writer
// allocates hundreds of kilobytes.
type encoder struct {
	zw  *gzip.Writer
	bw  *bufio.Writer
	out bytes.Buffer
}

// encode front-codes keys (sorted, unique, each starting with prefix)
// without the prefix and gzips the result. It returns the compressed bytes
// and the length before compression.
func encode(prefix string, keys []string) ([]byte, int, error) {
	var e encoder
	return e.encode(prefix, keys)
}

func (e *encoder) reset() {
	e.out = bytes.Buffer{}
	if e.zw == nil {
		e.zw, _ = gzip.NewWriterLevel(&e.out, gzip.DefaultCompression)
		e.bw = bufio.NewWriterSize(e.zw, 64<<10)
		return
	}
	e.zw.Reset(&e.out)
	e.bw.Reset(e.zw)
}

func (e *encoder) finish() ([]byte, error) {
	if err := e.bw.Flush(); err != nil {
		return nil, err
	}
	if err := e.zw.Close(); err != nil {
		return nil, err
	}
	return e.out.Bytes(), nil
}

func (e *encoder) encode(prefix string, keys []string) ([]byte, int, error) {
	e.reset()
	var (
		prev string
		raw  int
		num  [2 * binary.MaxVarintLen64]byte
	)
	for i, k := range keys {
		s, ok := strings.CutPrefix(k, prefix)
		if !ok {
			return nil, 0, fmt.Errorf("checkpoint: key %q is not under %s", k, prefix)
		}
		if i > 0 && s <= prev {
			return nil, 0, fmt.Errorf("checkpoint: keys not sorted and unique at %q", k)
		}
		shared := commonPrefix(prev, s)
		n := binary.PutUvarint(num[:], uint64(shared))
		n += binary.PutUvarint(num[n:], uint64(len(s)-shared))
		e.bw.Write(num[:n])
		e.bw.WriteString(s[shared:])
		raw += n + len(s) - shared
		prev = s
	}
	out, err := e.finish()
	return out, raw, err
}

// gzip compresses data.
func (e *encoder) gzip(data []byte) ([]byte, error) {
	e.reset()
	e.bw.Write(data)
	return e.finish()
}

// gunzip decompresses data, which must hold exactly rawBytes.
func gunzip(data []byte, rawBytes int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	// One byte more than promised, to tell a longer stream from an exact one.
	raw, err := io.ReadAll(io.LimitReader(zr, int64(rawBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(raw) != rawBytes {
		return nil, fmt.Errorf("%w: %d bytes, the manifest says %d", ErrCorrupt, len(raw), rawBytes)
	}
	return raw, nil
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// decode reverses encode: n keys, rawBytes bytes before compression.
func decode(prefix string, data []byte, n, rawBytes int) ([]string, error) {
	raw, err := gunzip(data, rawBytes)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, min(n, len(raw)/2+1))
	var prev string
	for len(raw) > 0 {
		shared, a := binary.Uvarint(raw)
		if a <= 0 {
			return nil, fmt.Errorf("%w: bad length", ErrCorrupt)
		}
		rest, b := binary.Uvarint(raw[a:])
		if b <= 0 {
			return nil, fmt.Errorf("%w: bad length", ErrCorrupt)
		}
		raw = raw[a+b:]
		if shared > uint64(len(prev)) || rest > uint64(len(raw)) || shared+rest > MaxKeyBytes {
			return nil, fmt.Errorf("%w: a key's lengths (%d shared, %d more) do not fit", ErrCorrupt, shared, rest)
		}
		s := prev[:shared] + string(raw[:rest])
		raw = raw[rest:]
		if len(keys) > 0 && s <= prev {
			return nil, fmt.Errorf("%w: keys out of order", ErrCorrupt)
		}
		keys = append(keys, prefix+s)
		prev = s
	}
	if len(keys) != n {
		return nil, fmt.Errorf("%w: %d keys, the manifest says %d", ErrCorrupt, len(keys), n)
	}
	return keys, nil
}

// split cuts data into chunks of at most size bytes (one empty chunk for
// no data, so every prefix has at least one).
func split(data []byte, size int) [][]byte {
	if len(data) == 0 {
		return [][]byte{nil}
	}
	var out [][]byte
	for len(data) > 0 {
		n := min(size, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}
