package heap

import "testing"

func TestClientGoPerKey(t *testing.T) {
	// Loose bounds: a queued key cannot cost less than its string (16 B)
	// nor, in client-go, more than a few hundred bytes.
	per, err := ClientGoPerKey(50000)
	if err != nil {
		t.Fatal(err)
	}
	if per < 16 || per > 1000 {
		t.Fatalf("client-go heap per key %.1f B: implausible", per)
	}
}
