package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// ClientCerts says what a server built with a CA file asks of its clients.
type ClientCerts int

const (
	// RequireClientCert fails the handshake of a client without a
	// certificate that verifies against the CA bundle (gRPC listeners).
	RequireClientCert ClientCerts = iota
	// VerifyClientCertIfGiven lets a client send no certificate (a
	// kubelet's probe of /healthz sends none); one it sends must verify.
	// The handler decides what a request without an Identity may do.
	VerifyClientCertIfGiven
)

// ErrNoServerName is returned by a client's handshake when there is no name
// to check the server's certificate against: a tls.Config from
// ClientConfig("") used to dial an IP address (which TLS does not send as
// a server name). Give the name, or use ClientCredentials, which takes it
// from the address dialed.
var ErrNoServerName = errors.New("tlsfiles: no server name to verify the server's certificate against")

// cipherSuites are the TLS 1.2 suites offered and accepted: ECDHE with an
// AEAD only (TLS 1.3's are not configurable, and all are modern).
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// ServerConfig returns the configuration of a TLS listener: it presents the
// current certificate and, with a CA file, asks for client certificates as
// mode says and verifies them against the current CA bundle. It is an
// error without a certificate file. The configuration may be cloned and
// given NextProtos, as grpc and net/http do.
func (s *Source) ServerConfig(mode ClientCerts) (*tls.Config, error) {
	if s.cfg.CertFile == "" {
		return nil, errors.New("tlsfiles: a server needs a certificate and key file")
	}
	// Load takes a pair outside its validity period (there is no other),
	// but no client would accept it from a server: refuse to serve it.
	if err := s.validAt(s.Certificate(), s.now()); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: cipherSuites,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.Certificate(), nil
		},
	}
	if s.cfg.CAFile == "" {
		return cfg, nil
	}
	// The handshake asks for a certificate and leaves its verification to
	// VerifyConnection, which verifies against the bundle as it is now
	// (tls.Config's ClientCAs would be fixed at this call). VerifyConnection
	// runs on resumed sessions too, so a CA removed, or a certificate
	// expired, since the first handshake is refused as well.
	cfg.ClientAuth = tls.RequireAnyClientCert
	if mode == VerifyClientCertIfGiven {
		cfg.ClientAuth = tls.RequestClientCert
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			if mode == VerifyClientCertIfGiven {
				return nil
			}
			return errors.New("tlsfiles: the client sent no certificate")
		}
		if err := s.verify(cs.PeerCertificates, "", x509.ExtKeyUsageClientAuth); err != nil {
			// The CN is not verified: anyone may send any, and the error
			// is logged (net/http's and grpc's handshake errors).
			return fmt.Errorf("tlsfiles: client certificate \"%s\": %w", Shown(cs.PeerCertificates[0].Subject.CommonName), err)
		}
		return nil
	}
	return cfg, nil
}

// ClientConfig returns the configuration of a TLS client: it presents the
// current certificate, if any, when the server asks for one, and verifies
// the server's chain against the current CA bundle (the system's roots
// without a CA file) and its name against serverName, or when that is
// empty against the name the connection was made with (tls.Config's
// ServerName, which grpc's credentials.NewTLS sets from the address's
// host). Dialing an IP address with serverName empty then fails with
// ErrNoServerName: TLS sends no IP address as a server name, so the
// address dialed is not known here. ClientCredentials has no such gap.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: cipherSuites,
		ServerName:   serverName,
		// Verification is VerifyConnection's, against the bundle as it is
		// at each handshake (tls.Config's RootCAs would be fixed here).
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := s.Certificate(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none to send
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			name := serverName
			if name == "" {
				name = cs.ServerName
			}
			if name == "" {
				return ErrNoServerName
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tlsfiles: the server sent no certificate")
			}
			if err := s.verify(cs.PeerCertificates, name, x509.ExtKeyUsageServerAuth); err != nil {
				return fmt.Errorf("tlsfiles: server certificate of %s: %w", name, err)
			}
			return nil
		},
	}
}

// verify verifies a peer's chain (leaf first) against the current CA
// bundle, for usage, and the leaf against name unless it is empty.
func (s *Source) verify(chain []*x509.Certificate, name string, usage x509.ExtKeyUsage) error {
	opts := x509.VerifyOptions{
		Roots:         s.Pool(), // nil: the system's roots
		Intermediates: x509.NewCertPool(),
		DNSName:       name,
		CurrentTime:   s.now(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := chain[0].Verify(opts)
	return err
}

// ServerCredentials returns gRPC server credentials of ServerConfig(mode).
func (s *Source) ServerCredentials(mode ClientCerts) (credentials.TransportCredentials, error) {
	cfg, err := s.ServerConfig(mode)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// ClientCredentials returns gRPC client credentials of ClientConfig: the
// server's name is serverName or, when that is empty, the host of each
// address dialed, an IP address included.
func (s *Source) ClientCredentials(serverName string) credentials.TransportCredentials {
	return &clientCredentials{src: s, serverName: serverName}
}

// clientCredentials makes a ClientConfig for each handshake, knowing the
// authority dialed.
type clientCredentials struct {
	src        *Source
	serverName string
}

var _ credentials.TransportCredentials = (*clientCredentials)(nil)

func (c *clientCredentials) ClientHandshake(ctx context.Context, authority string, rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	name := c.serverName
	if name == "" {
		name = authority
		if host, _, err := net.SplitHostPort(authority); err == nil {
			name = host
		}
	}
	return credentials.NewTLS(c.src.ClientConfig(name)).ClientHandshake(ctx, authority, rawConn)
}

func (c *clientCredentials) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsfiles: client credentials cannot serve (use ServerCredentials)")
}

func (c *clientCredentials) Info() credentials.ProtocolInfo {
	//lint:ignore SA1019 grpc-go still reads ServerName for the authority of a connection whose credentials name the server, and SecurityVersion is what TLS credentials report.
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2", ServerName: c.serverName}
}

func (c *clientCredentials) Clone() credentials.TransportCredentials {
	clone := *c
	return &clone
}

// OverrideServerName sets the name the server's certificate is checked
// against (grpc's deprecated hook, kept for the interface).
func (c *clientCredentials) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}
