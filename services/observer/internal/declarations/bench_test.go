package declarations

import (
	"fmt"
	"testing"

	"github.com/batonrun/baton/services/observer/internal/rules"
)

// BenchmarkUpdate is one Update of what an etcd writer can publish: 300
// declarations of 33 prefixes each and 5,000 refused ones, one of them
// changed since the last Update (as each change of a declaration makes the
// observer look at them all).
func BenchmarkUpdate(b *testing.B) {
	s := New(rules.Builtin(), reserved, nil)
	var entries []Entry
	for i := range 300 {
		d := wide(fmt.Sprintf("w%03d", i))
		v, err := d.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, Entry{Key: d.Key(), ModRevision: int64(i + 1), Value: v})
	}
	for i := range 5000 {
		entries = append(entries, Entry{Key: fmt.Sprintf("/baton/rules/bad%04d", i), ModRevision: int64(1000 + i), Value: []byte(`{"queue":"bad"}`)})
	}
	s.Update(entries)
	last := &entries[len(entries)-1]
	b.ResetTimer()
	for i := range b.N {
		last.ModRevision = int64(10000 + i)
		s.Update(entries)
	}
}
