// Package dial makes the gRPC connections of Baton's clients, once for all
// of them: every client package dials through it, so what a connection
// needs (message limits today; TLS and a list of addresses to try in turn
// next) is written in one place.
package dial

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// MaxMessageBytes bounds what a client sends and accepts: an observer List
// page of 10,000 objects fits, as does any request the servers take.
const MaxMessageBytes = 16 << 20

// Conn opens a connection to the Baton service what (for errors) at addr
// (host:port). The connection is lazy: the first call dials.
func Conn(what, addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
	)
	if err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", what, addr, err)
	}
	return conn, nil
}
