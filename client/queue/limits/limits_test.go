package limits

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// FuzzQueueName holds ValidQueueName to the regular expression it replaces.
func FuzzQueueName(f *testing.F) {
	for _, s := range []string{
		"", "a", "0", "-", "a-", "-a", "a-b", "pods", "replica-sets", "Pods", "a_b", "a.b", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b",
		"a\n", "a\x00", "a b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if got, want := ValidQueueName(q), labelRE.MatchString(q); got != want {
			t.Fatalf("ValidQueueName(%q) = %v, want %v", q, got, want)
		}
		if err := CheckQueueName(q); (err == nil) != ValidQueueName(q) {
			t.Fatalf("CheckQueueName(%q) = %v, disagreeing with ValidQueueName", q, err)
		}
	})
}

// FuzzErrorText holds ErrorText to its promise for any text: valid UTF-8 of
// at most MaxErrorBytes, unchanged when it already was, and marked when cut.
func FuzzErrorText(f *testing.F) {
	for _, s := range []string{
		"", "boom", "\xff", "a\xffb\xfe\xfdc", strings.Repeat("x", MaxErrorBytes), strings.Repeat("x", MaxErrorBytes+1),
		strings.Repeat("é", MaxErrorBytes), strings.Repeat("\xff", MaxErrorBytes), strings.Repeat("日本", 5000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := ErrorText(s)
		if len(got) > MaxErrorBytes || !utf8.ValidString(got) {
			t.Fatalf("ErrorText(%d bytes) = %d bytes, valid UTF-8 %v", len(s), len(got), utf8.ValidString(got))
		}
		if len(s) <= MaxErrorBytes && utf8.ValidString(s) && got != s {
			t.Fatalf("ErrorText changed %q to %q", s, got)
		}
		if cut := strings.ToValidUTF8(s, "\uFFFD"); len(cut) > MaxErrorBytes && !strings.HasSuffix(got, " [truncated from "+itoa(len(s))+" bytes]") {
			t.Fatalf("ErrorText cut %d bytes without saying so: ...%q", len(s), got[max(0, len(got)-60):])
		}
	})
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n < 10 {
			return string(b)
		}
		n /= 10
	}
}

func TestErrorTextKeepsTheStart(t *testing.T) {
	s := "reconcile web: " + strings.Repeat("goroutine 1 [running]:\n", 200000)
	got := ErrorText(s)
	if !strings.HasPrefix(got, "reconcile web: goroutine 1") {
		t.Errorf("ErrorText lost the start: %q", got[:40])
	}
	if want := " … [truncated from 4600015 bytes]"; !strings.HasSuffix(got, want) {
		t.Errorf("ErrorText ends %q, want %q", got[len(got)-50:], want)
	}
}

func TestChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"key ok", CheckKey("keys[0]", "default/web"), ""},
		{"key at limit", CheckKey("keys[0]", strings.Repeat("k", MaxKeyBytes)), ""},
		{"key empty", CheckKey("keys[2]", ""), "keys[2] is empty"},
		{"key long", CheckKey("keys[0]", strings.Repeat("k", MaxKeyBytes+1)), "keys[0] is 1025 bytes, over 1024"},
		{"key not utf8", CheckKey("acks[1].key", "a\xff"), "acks[1].key is not UTF-8"},
		{"count zero", CheckCount("keys", 0, 1), "keys is empty: give 1 to 10000"},
		{"count ok", CheckCount("keys", MaxBatch, 1), ""},
		{"count over", CheckCount("acks", MaxBatch+1, 1), "acks has 10001, over 10000 in one call"},
		{"max_items zero", CheckCount("max_items", 0, 0), ""},
		{"name at limit", CheckName("worker", strings.Repeat("w", MaxNameBytes)), ""},
		{"name long", CheckName("worker", strings.Repeat("w", 2<<20)), "worker is 2097152 bytes, over 256"},
		{"name not utf8", CheckName("source", "\xc3"), "source is not UTF-8"},
		{"delay at limit", CheckDuration("delay", MaxDelay, MaxDelay), ""},
		{"delay over", CheckDuration("delay", 240*365*24*time.Hour, MaxDelay), "delay 2102400h0m0s is over the limit of 8760h0m0s"},
		{"delay negative", CheckDuration("delay", -time.Second, MaxDelay), "delay is negative (-1s)"},
		{"queue", CheckQueueName(strings.Repeat("Q", 1000)), `queue "` + strings.Repeat("Q", 80) + `…" is not a DNS label`},
		{"member name host", CheckMemberName("name", "queue-0.queue.baton.svc.cluster.local"), ""},
		{"member name underscore, capitals", CheckMemberName("name", "Queue_A"), ""},
		{"member name at limit", CheckMemberName("name", strings.Repeat("m", MaxMemberNameBytes)), ""},
		{"member name empty", CheckMemberName("--name", ""), "--name is empty"},
		{"member name long", CheckMemberName("name", strings.Repeat("m", MaxMemberNameBytes+1)), "name is 254 bytes, over 253"},
		{"member name separator", CheckMemberName("name", "a=b"), `name "a=b" has "=" at byte 1`},
		{"member name comma", CheckMemberName("name", "a,b"), `name "a,b" has "," at byte 1`},
		{"member name space", CheckMemberName("name", "a b"), `has " " at byte 1`},
		{"member name not ascii", CheckMemberName("name", "é"), `has "\xc3" at byte 0`},
		{"addr host", CheckAddr("peer_addr", "queue-1.baton:7072"), ""},
		{"addr ipv4", CheckAddr("peer_addr", "10.0.0.7:7072"), ""},
		{"addr ipv6", CheckAddr("client_addr", "[fd00::7]:7070"), ""},
		{"addr longest host", CheckAddr("peer_addr", strings.Repeat("h", MaxMemberNameBytes)+":65535"), ""},
		{"addr empty", CheckAddr("peer_addr", ""), "peer_addr is empty: give host:port"},
		{"addr long", CheckAddr("peer_addr", strings.Repeat("h", MaxAddrBytes)+":1"), "peer_addr is 263 bytes, over 261"},
		{"addr no port", CheckAddr("peer_addr", "queue-1"), `peer_addr "queue-1" is not host:port`},
		{"addr port zero", CheckAddr("peer_addr", "queue-1:0"), `port "0" is not a number from 1 to 65535`},
		{"addr port high", CheckAddr("peer_addr", "queue-1:65536"), `port "65536" is not a number from 1 to 65535`},
		{"addr port named", CheckAddr("peer_addr", "queue-1:http"), `port "http" is not a number`},
		{"addr no host", CheckAddr("--advertise-addr", ":7070"), `--advertise-addr ":7070" has no host`},
		{"addr wildcard v4", CheckAddr("client_addr", "0.0.0.0:7070"), "has the wildcard host 0.0.0.0"},
		{"addr wildcard v6", CheckAddr("client_addr", "[::]:7070"), "has the wildcard host ::"},
		{"addr bad host", CheckAddr("client_addr", "a b:7070"), `host "a b" is neither an IP address nor a host name`},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: %v, want no error", c.name, c.err)
		case c.want != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%s: %v, want an error containing %q", c.name, c.err, c.want)
		case c.err != nil && !errors.Is(c.err, ErrInvalid):
			t.Errorf("%s: %v does not wrap ErrInvalid", c.name, c.err)
		}
	}
}

// TestPageTokenBound: the base64 of the longest key fits MaxPageTokenBytes.
func TestPageTokenBound(t *testing.T) {
	if n := (MaxKeyBytes*4 + 2) / 3; n > MaxPageTokenBytes {
		t.Errorf("a page token of the longest key has %d bytes, over %d", n, MaxPageTokenBytes)
	}
}
