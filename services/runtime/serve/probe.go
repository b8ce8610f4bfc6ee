package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
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

// Probe is the body of every binary's `healthcheck` subcommand (containers
// built FROM scratch have no shell or curl): it asks grpc.health.v1 on
// grpcAddr (if set) and GET /readyz on httpAddr (if set), and returns nil only
// if both say the service is ready.
func Probe(ctx context.Context, grpcAddr, httpAddr string) error {
	if grpcAddr != "" {
		conn, err := grpc.NewClient(LocalAddr(grpcAddr), grpc.WithTransportCredentials(insecure.NewCredentials()))
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
		url := "http://" + LocalAddr(httpAddr) + "/readyz"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
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
