package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/batonrun/baton/client/tlsfiles"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// LocalAddr turns a listen address into one to dial on this host: ":7070"
// and "0.0.0.0:7070" become "127.0.0.1:7070".
func LocalAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// ProbeOptions says how Probe reaches a service.
type ProbeOptions struct {
	// TLS, if set, probes over TLS (HTTPS for /readyz), presenting the
	// Source's certificate and verifying the service's against its CA
	// bundle; nil probes plaintext.
	TLS *tlsfiles.Source
	// ServerName is the name the service's certificate is checked
	// against; empty means the host of each address probed.
	ServerName string
}

// SelfProbe returns the ProbeOptions of a process probing its own service
// at listen (its healthcheck subcommand), with the process's own
// certificate: the service serves that same certificate, so it is checked
// against the host probed when the certificate names it, and otherwise
// against the certificate's first name (a wildcard address is probed on
// 127.0.0.1, which a certificate made for a cluster may not name).
func SelfProbe(src *tlsfiles.Source, listen string) ProbeOptions {
	o := ProbeOptions{TLS: src}
	if src == nil || src.Certificate() == nil || src.Certificate().Leaf == nil {
		return o
	}
	leaf := src.Certificate().Leaf
	host, _, err := net.SplitHostPort(LocalAddr(listen))
	if err == nil && leaf.VerifyHostname(host) == nil {
		return o
	}
	switch {
	case len(leaf.DNSNames) > 0:
		o.ServerName = leaf.DNSNames[0]
	case len(leaf.IPAddresses) > 0:
		o.ServerName = leaf.IPAddresses[0].String()
	}
	return o
}

// Probe is the body of every binary's `healthcheck` subcommand (containers
// built FROM scratch have no shell or curl) and of batonctl status: it asks
// grpc.health.v1 on grpcAddr (if set) and GET /readyz on httpAddr (if set),
// and returns nil only if both say the service is ready.
func Probe(ctx context.Context, grpcAddr, httpAddr string, o ProbeOptions) error {
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	scheme, client := "http", http.DefaultClient
	if o.TLS != nil {
		creds = o.TLS.ClientCredentials(o.ServerName) // empty: each address's host
		name := o.ServerName
		if host, _, err := net.SplitHostPort(LocalAddr(httpAddr)); name == "" && err == nil {
			// ClientConfig("") would take the name from the handshake,
			// which carries none for an IP address: name the host dialed.
			name = host
		}
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: o.TLS.ClientConfig(name), DisableKeepAlives: true}}
	}
	if grpcAddr != "" {
		conn, err := grpc.NewClient(LocalAddr(grpcAddr), grpc.WithTransportCredentials(creds))
		if err != nil {
			return fmt.Errorf("dial %s: %w", grpcAddr, err)
		}
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return fmt.Errorf("health check %s: %w", LocalAddr(grpcAddr), err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health check %s: %s", LocalAddr(grpcAddr), resp.GetStatus())
		}
	}
	if httpAddr != "" {
		url := scheme + "://" + LocalAddr(httpAddr) + "/readyz"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("get %s: %w", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("get %s: %s", url, resp.Status)
		}
	}
	return nil
}

// SignalContext returns a context cancelled by the first SIGINT or SIGTERM;
// a second signal exits at once with status 1 (controller-runtime's
// pkg/signals does the same).
func SignalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan os.Signal, 2)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-c
		cancel()
		<-c
		os.Exit(1)
	}()
	return ctx
}
