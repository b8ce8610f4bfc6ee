package etcdraft

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// transport is one TCP stream per ordered pair of members carrying
// length-prefixed raftpb.Messages, which is all etcd raft asks of a
// network: messages may be lost, duplicated or reordered across streams and
// the protocol copes; an unreachable peer is reported so the leader probes
// it instead of pipelining into the void. rafthttp would add HTTP, a
// pipeline and a stream per pair, versioning and snapshot streaming: more
// than the spike needs, and the queue will speak gRPC anyway.
type transport struct {
	ln    net.Listener
	step  func(context.Context, raftpb.Message) error
	unrch func(id uint64)
	peers map[uint64]*peer

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type peer struct {
	addr string
	out  chan []byte
	stop chan struct{}
}

// maxFrame bounds one message read from the network; etcd raft's own
// MaxSizePerMsg (1 MiB here) keeps appends well below it.
const maxFrame = 64 << 20

func newTransport(ln net.Listener, addrs map[uint64]string, self uint64, step func(context.Context, raftpb.Message) error, unreachable func(uint64)) *transport {
	t := &transport{ln: ln, step: step, unrch: unreachable, peers: map[uint64]*peer{}, conns: map[net.Conn]struct{}{}}
	for id, a := range addrs {
		if id == self {
			continue
		}
		p := &peer{addr: a, out: make(chan []byte, 4096), stop: make(chan struct{})}
		t.peers[id] = p
		t.wg.Add(1)
		go t.sender(id, p)
	}
	t.wg.Add(1)
	go t.accept()
	return t
}

// send queues a marshalled message; a full queue drops it (and reports the
// peer unreachable) rather than stall the Ready loop behind a slow peer.
func (t *transport) send(to uint64, msg []byte) {
	p := t.peers[to]
	if p == nil {
		return
	}
	select {
	case p.out <- msg:
	default:
		t.unrch(to)
	}
}

func (t *transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *transport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	c.Close()
}

func (t *transport) sender(id uint64, p *peer) {
	defer t.wg.Done()
	var c net.Conn
	var w *bufio.Writer
	defer func() {
		if c != nil {
			t.untrack(c)
		}
	}()
	var hdr [4]byte
	for {
		var msg []byte
		select {
		case msg = <-p.out:
		case <-p.stop:
			return
		}
		if c == nil {
			d := net.Dialer{Timeout: 200 * time.Millisecond}
			nc, err := d.Dial("tcp", p.addr)
			if err != nil {
				t.unrch(id)
				continue // the message is lost; raft resends what matters
			}
			if !t.track(nc) {
				return
			}
			c, w = nc, bufio.NewWriterSize(nc, 256<<10)
		}
		err := func() error {
			for {
				binary.BigEndian.PutUint32(hdr[:], uint32(len(msg)))
				if _, err := w.Write(hdr[:]); err != nil {
					return err
				}
				if _, err := w.Write(msg); err != nil {
					return err
				}
				// Everything already queued goes in the same flush.
				select {
				case msg = <-p.out:
					continue
				default:
				}
				return w.Flush()
			}
		}()
		if err != nil {
			t.untrack(c)
			c, w = nil, nil
			t.unrch(id)
		}
	}
}

func (t *transport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		if !t.track(c) {
			return
		}
		t.wg.Add(1)
		go t.receive(c)
	}
}

func (t *transport) receive(c net.Conn) {
	defer t.wg.Done()
	defer t.untrack(c)
	r := bufio.NewReaderSize(c, 256<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxFrame {
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		var m raftpb.Message
		if err := m.Unmarshal(buf); err != nil {
			return
		}
		if err := t.step(context.Background(), m); err != nil {
			return // the node stopped
		}
	}
}

// close cuts every connection at once, as a dead process's kernel would.
func (t *transport) close() {
	t.mu.Lock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.ln.Close()
	for _, p := range t.peers {
		close(p.stop)
	}
	t.wg.Wait()
}
