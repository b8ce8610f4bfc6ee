// Package dial makes the gRPC connections of Baton's clients, once for all
// of them: every client package dials through it, so what a connection
// needs (message limits, a list of addresses to fail over between, TLS)
// is written in one place.
package dial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/batonrun/baton/client/tlsfiles"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// MaxMessageBytes bounds what a client sends and accepts: an observer List
// page of 10,000 objects fits, as does any request the servers take.
const MaxMessageBytes = 16 << 20

// Addrs splits a comma-separated list of host:port addresses, refusing an
// empty list and any entry that is not host:port.
func Addrs(list string) ([]string, error) {
	var out []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, fmt.Errorf("address %q is not host:port", a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no address in %q", list)
	}
	return out, nil
}

// Options are what a connection needs besides its address.
type Options struct {
	// TLS, if set, makes the connection TLS (docs/security.md): it
	// presents the Source's certificate, if it has one, and verifies the
	// server's against the Source's CA bundle and the host of the address
	// dialed. Nil dials plaintext.
	TLS *tlsfiles.Source
}

// Conn opens a connection to the Baton service what (for errors) at addr:
// one host:port, or a comma-separated list of them. With a list, the
// connection uses the first address that accepts it and moves to the next
// when that one fails (gRPC's pick_first over the list), so a client keeps
// working while any listed member of a service answers; the clients' retry
// of UNAVAILABLE calls then lands on the next address. With TLS each
// address's server is verified against that address's own host. The
// connection is lazy: the first call dials.
func Conn(what, addr string, o Options) (*grpc.ClientConn, error) {
	addrs, err := Addrs(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", what, err)
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		// The name checked is the host of the authority each handshake is
		// given: the address dialed, or its ServerName below.
		creds = o.TLS.ClientCredentials("")
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
	}
	target := addrs[0]
	if len(addrs) > 1 {
		// A resolver of its own per connection: the list is this
		// connection's, not a process-wide registration.
		r := manual.NewBuilderWithScheme("baton-" + what)
		state := resolver.State{}
		for _, a := range addrs {
			// ServerName is the authority of this address's handshake
			// (and its :authority header); without it every address
			// would get the target's, the whole list, and no server's
			// certificate would match it.
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: a})
		}
		r.InitialState(state)
		opts = append(opts, grpc.WithResolvers(r))
		target = r.Scheme() + ":///" + strings.Join(addrs, ",")
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", what, addr, err)
	}
	return conn, nil
}

// Members is one connection to each member of a replicated service, of
// which calls use one at a time, the current one, until the caller moves
// them on (Next). gRPC's pick_first over the list moves only when a
// connection fails; a member whose port answers but cannot serve (it is
// cut off from its peers and knows no leader, or cannot reach the one it
// knows) would keep a client's every retry. The clients' retry of
// UNAVAILABLE calls Next, so each retry goes to another member.
type Members struct {
	conns []*grpc.ClientConn
	cur   atomic.Uint32
}

var _ grpc.ClientConnInterface = (*Members)(nil)

// MemberConns opens a connection (Conn) to each address of the
// comma-separated list addr; the first is current.
func MemberConns(what, addr string, o Options) (*Members, error) {
	addrs, err := Addrs(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", what, err)
	}
	m := &Members{}
	for _, a := range addrs {
		c, err := Conn(what, a, o)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.conns = append(m.conns, c)
	}
	return m, nil
}

// Len is the number of members.
func (m *Members) Len() int { return len(m.conns) }

// Current is the index of the connection calls use now, for Next.
func (m *Members) Current() uint32 { return m.cur.Load() }

// Next moves calls to the member after from, unless another caller moved
// them on since from was current: a refusal seen by many concurrent calls
// moves them once.
func (m *Members) Next(from uint32) {
	m.cur.CompareAndSwap(from, (from+1)%uint32(len(m.conns)))
}

func (m *Members) conn() *grpc.ClientConn { return m.conns[m.cur.Load()%uint32(len(m.conns))] }

// Invoke implements grpc.ClientConnInterface on the current connection.
func (m *Members) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return m.conn().Invoke(ctx, method, args, reply, opts...)
}

// NewStream implements grpc.ClientConnInterface on the current connection.
func (m *Members) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return m.conn().NewStream(ctx, desc, method, opts...)
}

// Close closes every connection.
func (m *Members) Close() error {
	var errs []error
	for _, c := range m.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
