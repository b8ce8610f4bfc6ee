package raftbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// Members is the cluster size the replicated queue is designed for.
const Members = 3

// Cluster is what both adapters implement: three members on loopback TCP,
// each with its own data directory and real fsyncs.
type Cluster interface {
	// Propose returns once rec is committed (on a majority's disks) and
	// applied on the leader that took it. An error leaves it unknown whether
	// rec was committed, as a timed-out write to any replicated store does.
	Propose(ctx context.Context, rec []byte) error
	// Leader is the index of a live member that believes it leads, or -1.
	Leader() int
	// Kill stops member i as abruptly as one process can stop a part of
	// itself: its network goes first, then its Raft goroutines, then its
	// files are closed without a sync or a goodbye to its peers.
	Kill(i int) error
	// Restart brings a killed member back from its data directory.
	Restart(i int) error
	// Applied is what member i has applied so far.
	Applied(i int) Applied
	// Stats counts member i's durable log writes since it (re)started.
	Stats(i int) Stats
	Close() error
}

// Options configure either adapter.
type Options struct {
	// Dir holds one data directory per member.
	Dir string
	// Coalesce has one proposer goroutine put every record waiting at the
	// moment into one Raft entry (the queue's group commit, moved in front
	// of Raft). Off, each record is its own entry and only the library's own
	// batching groups them.
	Coalesce bool
	// KeepApplied keeps every applied record, for tests that compare the
	// sequences; otherwise only a count and a hash chain are kept.
	KeepApplied bool
	// MaxAppendEntries is hashicorp/raft's batch limit (0: its default).
	MaxAppendEntries int
}

// Stats are a member's durable writes: Syncs is how many batches were made
// durable (etcdraft: fdatasync calls; hashiraft: bbolt commits, each two
// fdatasyncs, data pages then meta page), Entries how many log entries they
// held.
type Stats struct {
	Syncs   uint64
	Entries uint64
}

// Errors an adapter's Propose may return besides the context's.
var (
	ErrNoLeader      = errors.New("raftbench: no leader")
	ErrLeaderChanged = errors.New("raftbench: leadership changed before the proposal was applied")
	ErrStopped       = errors.New("raftbench: member stopped")
)

// Applied is a member's state machine: the records it applied, in order,
// as a count and an FNV-1a hash chain (and the records themselves with
// Options.KeepApplied). Two members applied the same sequence iff their
// counts and sums agree (up to hash collisions, which tests also rule out
// by comparing records).
type Applied struct {
	Count   int
	Sum     uint64
	Records [][]byte
}

const fnvOffset, fnvPrime = 14695981039346656037, 1099511628211

func (a *Applied) add(rec []byte, keep bool) {
	h := a.Sum
	if a.Count == 0 {
		h = fnvOffset
	}
	// The length goes into the chain so that record boundaries count.
	var n [binary.MaxVarintLen64]byte
	for _, b := range n[:binary.PutUvarint(n[:], uint64(len(rec)))] {
		h = (h ^ uint64(b)) * fnvPrime
	}
	for _, b := range rec {
		h = (h ^ uint64(b)) * fnvPrime
	}
	a.Sum = h
	a.Count++
	if keep {
		a.Records = append(a.Records, append([]byte(nil), rec...))
	}
}

// StateMachine is the Applied state shared by the adapters, safe for one
// applier and concurrent readers.
type StateMachine struct {
	mu   sync.Mutex
	keep bool
	a    Applied
}

// NewStateMachine returns an empty state machine.
func NewStateMachine(keep bool) *StateMachine { return &StateMachine{keep: keep} }

// ApplyEntry applies every record of one entry's data (EncodeEntry's format).
func (s *StateMachine) ApplyEntry(data []byte) error {
	_, recs, err := DecodeEntry(data)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.a.add(r, s.keep)
	}
	return nil
}

// Get returns a copy of the state.
func (s *StateMachine) Get() Applied {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.a
	a.Records = append([][]byte(nil), s.a.Records...)
	return a
}

// Marshal encodes the state for a snapshot.
func (s *StateMachine) Marshal() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := binary.AppendUvarint(nil, uint64(s.a.Count))
	b = binary.BigEndian.AppendUint64(b, s.a.Sum)
	b = binary.AppendUvarint(b, uint64(len(s.a.Records)))
	for _, r := range s.a.Records {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

// Restore replaces the state with a Marshal'ed one.
func (s *StateMachine) Restore(b []byte) error {
	var a Applied
	n, k := binary.Uvarint(b)
	if k <= 0 || len(b) < k+8 {
		return errors.New("raftbench: short snapshot")
	}
	a.Count = int(n)
	a.Sum = binary.BigEndian.Uint64(b[k:])
	recs, err := decodeRecords(b[k+8:])
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		a.Records = recs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.a = a
	return nil
}

// EncodeEntry makes one Raft entry's data: the proposal id (so the member
// that proposed it can answer its callers when it is applied), then the
// records, each uvarint-length-prefixed, as a store frame holds them.
func EncodeEntry(id uint64, recs [][]byte) []byte {
	size := 8 + binary.MaxVarintLen64
	for _, r := range recs {
		size += binary.MaxVarintLen64 + len(r)
	}
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

// DecodeEntry is EncodeEntry's inverse; the records alias data.
func DecodeEntry(data []byte) (uint64, [][]byte, error) {
	if len(data) < 8 {
		return 0, nil, fmt.Errorf("raftbench: entry of %d bytes", len(data))
	}
	recs, err := decodeRecords(data[8:])
	return binary.BigEndian.Uint64(data), recs, err
}

func decodeRecords(b []byte) ([][]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errors.New("raftbench: bad record count")
	}
	b = b[k:]
	recs := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errors.New("raftbench: bad record length")
		}
		recs = append(recs, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	return recs, nil
}
