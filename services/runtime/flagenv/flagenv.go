// Package flagenv lets every flag of a binary also be set from the
// environment, as BATON_<SERVICE>_<FLAG> (--data-dir of baton-queue is
// BATON_QUEUE_DATA_DIR). A flag given on the command line wins, as etcd's
// pkg/flags does it. ListVar is the one way the binaries take a
// comma-separated list (--etcd-endpoints).
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvName returns the environment variable that mirrors flag name under
// prefix: EnvName("BATON_QUEUE", "data-dir") is "BATON_QUEUE_DATA_DIR".
func EnvName(prefix, name string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Parse parses args into fs, then sets every flag not given on the command
// line from its environment variable, if that is set. lookup is os.LookupEnv
// when nil. An unparsable value names the variable.
func Parse(fs *flag.FlagSet, prefix string, args []string, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		env := EnvName(prefix, f.Name)
		v, ok := lookup(env)
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("invalid value %q for %s: %w", v, env, serr)
		}
	})
	return err
}
