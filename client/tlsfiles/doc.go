// Package tlsfiles is a process's TLS identity read from files: its
// certificate and key, and the CA bundle that verifies the other side. It
// builds the server and client *tls.Config (and gRPC credentials) of every
// Baton binary, and reads the Identity of a verified peer: its name and
// roles. See docs/security.md, "Certificates", and docs/design.md, "Trust".
//
//	src, err := tlsfiles.Load(tlsfiles.Config{
//		CertFile: "certs/queue.crt", KeyFile: "certs/queue.key", CAFile: "certs/ca.crt",
//		Logger: logger,
//	})
//	if err != nil {
//		return err // names the file: missing, no certificate in it, key not matching
//	}
//	creds, err := src.ServerCredentials(tlsfiles.RequireClientCert)
//	srv := grpc.NewServer(grpc.Creds(creds))
//	…
//	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(src.ClientCredentials("")))
//
// # Rotation
//
// Every handshake first checks the files with a stat (size, modification
// time, inode); one that changed is read again, and so is one modified in
// the last two seconds, whose stat cannot tell a second write in the same
// clock tick from none (its bytes are compared with the last read). A
// connection made after a change therefore uses the new files, without a
// restart. A change that cannot be used (a file missing, half written, or a
// new certificate beside the old key, as between a rotation's two renames)
// keeps the last good certificate and key, or CA bundle, in use: it is
// logged at WARN and passed to Config.OnError once, and the next change is
// tried again. The certificate with its key and the CA bundle are reloaded
// independently.
//
// A file is read only when it is a regular file of at most MaxFileBytes:
// a device, a FIFO or a directory in its place is refused before it is
// opened (ErrNotRegular), a larger file is not read (ErrTooLarge), and a
// file that grows while it is read is read no further than the limit.
// A new pair whose certificate is outside its validity period
// (ErrExpired, ErrNotYetValid) is refused likewise and never becomes the
// pair kept; one not valid yet is taken when its NotBefore passes. Load
// takes such a pair, since there is no other, with a WARN: a client may
// present it (its peer refuses it), but ServerConfig refuses to serve it.
//
// # Verification
//
// A server built with a CA file requires (RequireClientCert) or accepts
// (VerifyClientCertIfGiven) a client certificate, and verifies it against
// the CA bundle as it is at that handshake, for client authentication. A
// client verifies the server's chain against the CA bundle (the system's
// roots without one) and the server's name against its certificate's
// names. Both sides present the current certificate. TLS 1.2 is the
// minimum, with AEAD cipher suites only.
//
// # Identities
//
// The Identity of a verified peer is its certificate's subject: CN is the
// name, and each subject O value written "baton:<role>" is a role
// (RoleObserver, RoleWorker, RoleViewer, RoleAdmin, RoleQueuePeer).
// IdentityFromPeer reads it in a gRPC handler, IdentityFromRequest in an
// HTTP handler.
package tlsfiles
