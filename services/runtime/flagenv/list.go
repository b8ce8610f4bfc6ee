package flagenv

import (
	"flag"
	"strings"
)

// ListVar defines a flag whose value is a comma-separated list, as
// --etcd-endpoints a,b takes etcd's client URLs: each value given replaces
// the list (it does not append), and members are trimmed, empty ones
// dropped, so "a, b," is [a b]. *p is the default; the environment sets it
// as any flag (BATON_WORKER_ETCD_ENDPOINTS=a,b).
func ListVar(fs *flag.FlagSet, p *[]string, name, usage string) {
	fs.Var((*list)(p), name, usage)
}

// SplitList splits a comma-separated list as ListVar does.
func SplitList(s string) []string {
	var out []string
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// list is a flag.Value over a []string.
type list []string

func (l *list) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *list) Set(s string) error {
	*l = SplitList(s)
	return nil
}
