package flagenv

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestListVar(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"default", nil, nil, []string{"http://127.0.0.1:2379"}},
		{"flag", []string{"--etcd-endpoints", " http://a:2379, http://b:2379,"}, nil, []string{"http://a:2379", "http://b:2379"}},
		{"twice: the last wins", []string{"--etcd-endpoints", "http://a:2379", "--etcd-endpoints", "http://b:2379"}, nil, []string{"http://b:2379"}},
		{"environment", nil, map[string]string{"BATON_X_ETCD_ENDPOINTS": "http://c:2379,http://d:2379"}, []string{"http://c:2379", "http://d:2379"}},
		{"empty", []string{"--etcd-endpoints", " , "}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			eps := []string{"http://127.0.0.1:2379"}
			ListVar(fs, &eps, "etcd-endpoints", "comma-separated etcd client URLs")
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			if err := Parse(fs, "BATON_X", tc.args, lookup); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(eps, tc.want) {
				t.Errorf("got %q, want %q", eps, tc.want)
			}
		})
	}
	// -help shows the default as it is written.
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	eps := []string{"http://a:2379", "http://b:2379"}
	ListVar(fs, &eps, "etcd-endpoints", "comma-separated etcd client URLs")
	fs.PrintDefaults()
	if !strings.Contains(b.String(), `(default http://a:2379,http://b:2379)`) {
		t.Errorf("usage:\n%s", b.String())
	}
}
