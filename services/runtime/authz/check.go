package authz

import (
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	"path"
	"slices"
	"strings"
)

// checkMethod returns why m cannot be one of a Rule's Methods, or nil.
func checkMethod(m string) error {
	svc, meth, ok := splitMethod(m)
	if !ok {
		return fmt.Errorf("method %q is not a full gRPC method name (%q, or %q for every method of the service)",
			m, "/baton.queue.v1.QueueService/Add", "/baton.queue.v1.QueueService/*")
	}
	if slices.Contains(openServices, svc) {
		return fmt.Errorf("method %s: %s is open to every client with a verified certificate, and a policy does not name it", m, svc)
	}
	s, ok := findService(svc)
	if !ok {
		names := make([]string, len(services))
		for i, s := range services {
			names[i] = s.name
		}
		return fmt.Errorf("method %s: unknown service %s (the services are %s)", m, svc, strings.Join(names, ", "))
	}
	if meth == "*" || slices.Contains(s.methods, m) {
		return nil
	}
	short := make([]string, len(s.methods))
	for i, full := range s.methods {
		_, short[i], _ = splitMethod(full)
	}
	return fmt.Errorf("unknown method %s (%s has %s; /%s/* is all of them)", m, s.short, strings.Join(short, ", "), s.name)
}

// expandMethod returns the full method names a checked Rule method covers.
func expandMethod(m string) []string {
	svc, meth, _ := splitMethod(m)
	if meth != "*" {
		return []string{m}
	}
	s, _ := findService(svc)
	return s.methods
}

// isKnownMethod reports whether full is a method of the role table's
// services.
func isKnownMethod(full string) bool {
	svc, _, ok := splitMethod(full)
	if !ok {
		return false
	}
	s, ok := findService(svc)
	return ok && slices.Contains(s.methods, full)
}

// isQueuedPattern reports whether a checked Rule method is of a service
// whose requests name a queue.
func isQueuedPattern(m string) bool {
	svc, _, _ := splitMethod(m)
	s, ok := findService(svc)
	return ok && s.queued
}

// queuePatternChars are the characters a queue pattern may hold: those of
// a queue name and path.Match's.
const queuePatternChars = "abcdefghijklmnopqrstuvwxyz0123456789-" + `*?[]^\`

// checkQueuePattern returns why q cannot be one of a Rule's Queues, or nil.
func checkQueuePattern(q string) error {
	if q == "" {
		return fmt.Errorf("a queue is empty")
	}
	if i := strings.IndexFunc(q, func(r rune) bool { return !strings.ContainsRune(queuePatternChars, r) }); i >= 0 {
		return fmt.Errorf("queue %q has %q, which no queue name has (queue names are DNS labels: a-z, 0-9 and -)", q, []rune(q[i:])[0])
	}
	if _, err := path.Match(q, ""); err != nil {
		return fmt.Errorf("queue pattern %q is malformed: %w", q, err)
	}
	if !strings.ContainsAny(q, `*?[\`) && !limits.ValidQueueName(q) {
		return fmt.Errorf("queue %q is not a queue name (a DNS label: a-z, 0-9 and -, beginning and ending with a letter or digit, at most %d bytes)", q, limits.MaxQueueNameBytes)
	}
	return nil
}

// checkPath returns why p cannot be one of a Rule's Paths, or nil.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q does not begin with /", p)
	}
	if i := strings.IndexFunc(p, func(r rune) bool { return r <= ' ' || r > '~' }); i >= 0 {
		return fmt.Errorf("path %q has %q: a policy's paths are printable ASCII without spaces", p, []rune(p[i:])[0])
	}
	if strings.ContainsAny(p, "*{}?#") {
		return fmt.Errorf("path %q is not a literal path (no *, {}, ? or #): one that ends in / covers everything under it", p)
	}
	if c := cleanPath(p); c != p {
		return fmt.Errorf("path %q is not clean: write %q", p, c)
	}
	if slices.Contains(openPaths, p) {
		return fmt.Errorf("path %s is open to everyone (probes send no certificate), and a policy does not name it", p)
	}
	return nil
}
