package serve

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// These tests speak HTTP/2 frame by frame to a real plaintext server,
// because what they check is what a grpc-go client never does: it pings
// at most every 10 s (grpc-go raises a shorter keepalive.ClientParameters
// Time to its internal minimum, which a program cannot lower), and it
// queues calls beyond the server's stream bound instead of sending them.

// frame is what the tests need of a frame the server sent, copied out of
// the Framer's buffers.
type frame struct {
	typ      http2.FrameType
	streamID uint32
	ack      bool
	data     [8]byte       // a PING's
	code     http2.ErrCode // a GOAWAY's or RST_STREAM's
	debug    string        // a GOAWAY's
	settings map[http2.SettingID]uint32
}

// rawConn is a client connection spoken frame by frame.
type rawConn struct {
	c      net.Conn
	fr     *http2.Framer
	frames chan frame // closed when the connection's reading ends
	end    chan error // then holds the reading's error
}

// rawDial opens an HTTP/2 connection to addr, exchanges SETTINGS and
// returns the server's.
func rawDial(t *testing.T, addr string) (*rawConn, map[http2.SettingID]uint32) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A bound on the whole conversation: no test here takes longer.
	if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{c: c, fr: http2.NewFramer(c, c), frames: make(chan frame, 4096), end: make(chan error, 1)}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go rc.read()
	f := rc.next(t, func(f frame) bool { return f.typ == http2.FrameSettings && !f.ack })
	if err := rc.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return rc, f.settings
}

func (rc *rawConn) read() {
	defer close(rc.frames)
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			rc.end <- err
			return
		}
		out := frame{typ: f.Header().Type, streamID: f.Header().StreamID}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			out.ack = f.IsAck()
			out.settings = map[http2.SettingID]uint32{}
			_ = f.ForeachSetting(func(s http2.Setting) error { out.settings[s.ID] = s.Val; return nil })
		case *http2.PingFrame:
			out.ack, out.data = f.IsAck(), f.Data
		case *http2.GoAwayFrame:
			out.code, out.debug = f.ErrCode, string(f.DebugData())
		case *http2.RSTStreamFrame:
			out.code = f.ErrCode
		}
		rc.frames <- out
	}
}

// next returns the next frame that match accepts, skipping others, and
// fails the test if the connection ends first.
func (rc *rawConn) next(t *testing.T, match func(frame) bool) frame {
	t.Helper()
	for f := range rc.frames {
		if match(f) {
			return f
		}
		if f.typ == http2.FrameGoAway {
			t.Fatalf("GOAWAY %v %q while waiting for another frame", f.code, f.debug)
		}
	}
	t.Fatalf("the connection ended: %v", <-rc.end)
	return frame{}
}

// ping sends a PING with payload n and returns at once.
func (rc *rawConn) ping(t *testing.T, n byte) {
	t.Helper()
	if err := rc.fr.WritePing(false, [8]byte{n}); err != nil {
		t.Fatalf("ping %d: %v", n, err)
	}
}

func isPingAck(n byte) func(frame) bool {
	return func(f frame) bool { return f.typ == http2.FramePing && f.ack && f.data == [8]byte{n} }
}

// TestKeepalivePingsFasterThanPolicy: a client that pings more often than
// KeepaliveMinTime is sent GOAWAY ENHANCE_YOUR_CALM "too_many_pings" and
// disconnected (a grpc-go client reports its calls UNAVAILABLE); one that
// pings at the policy's pace, with no call open (PermitWithoutStream), is
// not. The second half is what fails with grpc-go's default policy (pings
// at most every 5 minutes): it takes three pings inside the interval
// after the first, so about 17 s, run in parallel with the first.
func TestKeepalivePingsFasterThanPolicy(t *testing.T) {
	g, _ := runServe(t, Options{Name: "test", GRPCAddr: "127.0.0.1:0"})

	t.Run("faster", func(t *testing.T) {
		t.Parallel()
		rc, _ := rawDial(t, g)
		// The server answers each PING, and on the third too soon after
		// the one before (grpc-go's maxPingStrikes+1) sends GOAWAY and
		// closes. 100 ms apart is fifty times too often.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		timeout := time.After(10 * time.Second)
		var away frame
		sent := 0
		for away.typ != http2.FrameGoAway {
			select {
			case <-tick.C:
				sent++
				// A write can meet the connection closed by the GOAWAY
				// not yet read: the reading reports what happened.
				_ = rc.fr.WritePing(false, [8]byte{byte(sent)})
			case f, ok := <-rc.frames:
				if !ok {
					t.Fatalf("the connection ended without a GOAWAY after %d pings: %v", sent, <-rc.end)
				}
				if f.typ == http2.FrameGoAway {
					away = f
				}
			case <-timeout:
				t.Fatalf("no GOAWAY after %d pings in 10 s", sent)
			}
		}
		if away.code != http2.ErrCodeEnhanceYourCalm || away.debug != "too_many_pings" {
			t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM \"too_many_pings\"", away.code, away.debug)
		}
		if sent > 10 {
			t.Errorf("GOAWAY after %d pings, want it after the few strikes grpc-go allows", sent)
		}
		for range rc.frames { // the server closes the connection
		}
		if err := <-rc.end; err == nil {
			t.Fatal("the connection's reading ended without an error")
		}
	})

	t.Run("at the policy's pace", func(t *testing.T) {
		t.Parallel()
		rc, _ := rawDial(t, g)
		// The pace is what the test checks, so it sleeps: a margin above
		// KeepaliveMinTime absorbs the scheduling of both ends.
		const pings = 4
		for n := byte(1); n <= pings; n++ {
			if n > 1 {
				time.Sleep(KeepaliveMinTime + 500*time.Millisecond)
			}
			rc.ping(t, n)
			rc.next(t, isPingAck(n))
		}
		// A GOAWAY for the last ping would follow its ack; the ack of a
		// SETTINGS sent after it shows none came.
		if err := rc.fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		rc.next(t, func(f frame) bool { return f.typ == http2.FrameSettings && f.ack })
	})
}

// TestMaxConcurrentStreams: a Baton server announces MaxConcurrentStreams
// in its SETTINGS, holds that many calls open on one connection, and
// refuses the next stream (RST_STREAM REFUSED_STREAM) while they are open.
func TestMaxConcurrentStreams(t *testing.T) {
	g, _ := runServe(t, Options{Name: "test", GRPCAddr: "127.0.0.1:0"})
	rc, settings := rawDial(t, g)
	if got, ok := settings[http2.SettingMaxConcurrentStreams]; !ok || got != MaxConcurrentStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want %d", got, ok, MaxConcurrentStreams)
	}

	// Calls of grpc.health.v1 Watch whose request never comes: each stays
	// open, its handler waiting for the message.
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Watch"},
		{":authority", g}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]}); err != nil {
			t.Fatal(err)
		}
	}
	block := hb.Bytes()
	last := uint32(2*MaxConcurrentStreams + 1) // client streams are odd: the bound's next
	for id := uint32(1); id <= last; id += 2 {
		if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
			t.Fatalf("HEADERS of stream %d: %v", id, err)
		}
	}
	f := rc.next(t, func(f frame) bool { return f.typ == http2.FrameRSTStream })
	if f.streamID != last || f.code != http2.ErrCodeRefusedStream {
		t.Fatalf("RST_STREAM of stream %d (%v), want stream %d (call %d) REFUSED_STREAM",
			f.streamID, f.code, last, MaxConcurrentStreams+1)
	}
}
