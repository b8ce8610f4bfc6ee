package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/runtime/flagenv"
)

// certsInitFlags are certs init's flags.
type certsInitFlags struct {
	hosts        string
	days, caDays int
	force, keep  bool
	keyGroup     int
}

func setupCertsInit(fs *flag.FlagSet, a *app) runFunc {
	var o certsInitFlags
	fs.StringVar(&o.hosts, "hosts", strings.Join(certs.DefaultHosts(), ","), "comma-separated DNS names and IP addresses every certificate is valid for")
	fs.IntVar(&o.days, "days", certs.DefaultDays, "how many days each service's certificate is valid")
	fs.IntVar(&o.caDays, "ca-days", certs.DefaultCADays, "how many days the CA is valid")
	fs.BoolVar(&o.force, "force", false, "replace files that exist")
	fs.BoolVar(&o.keep, "keep", false, "keep the CA and every certificate in DIR, and issue only those missing (for a one-shot that runs at every start)")
	fs.IntVar(&o.keyGroup, "key-group", -1, "make the services' keys ("+strings.Join(certs.ServiceNames(), ", ")+") readable by this group (0640), for services that run as another user of it; the CA's and the users' keys stay 0600")
	return func(_ context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("usage: batonctl certs init DIR [--hosts H,…] [--days N] [--ca-days N] [--force|--keep] [--key-group GID]")
		}
		return certsInit(a, pos[0], o)
	}
}

// certsInit writes a CA and a certificate for each service and kind of
// user into dir (package certs).
func certsInit(a *app, dir string, o certsInitFlags) error {
	if o.force && o.keep {
		return usagef("--force replaces every file and --keep none: give one")
	}
	if o.keyGroup < -1 {
		return usagef("--key-group %d: a group id is 0 or more", o.keyGroup)
	}
	hostList, err := hostsFlag(o.hosts)
	if err != nil {
		return err
	}
	if len(hostList) == 0 {
		return usagef("--hosts is empty: the services' certificates need the names they are reached by (default %s)", strings.Join(certs.DefaultHosts(), ","))
	}
	if err := certs.ValidateDays(o.days); err != nil {
		return usagef("--days: %v", err)
	}
	if err := certs.ValidateDays(o.caDays); err != nil {
		return usagef("--ca-days: %v", err)
	}
	if o.days > o.caDays {
		return usagef("--days %d is longer than the CA's --ca-days %d", o.days, o.caDays)
	}
	now := a.now()
	leaves := certs.Defaults(hostList, o.days)
	var written []certs.Written
	if o.keep {
		written, err = certs.Complete(dir, o.caDays, leaves, now)
	} else {
		var ca *certs.CA
		if ca, err = certs.NewCA(o.caDays, now); err == nil {
			written, err = certs.Init(dir, ca, leaves, o.force, now)
		}
	}
	if err == nil {
		err = share(dir, written, o.keyGroup)
	}
	if err != nil {
		return err
	}
	if len(written) == 0 {
		fmt.Fprintf(a.Stdout, "%s holds the CA and every certificate already: nothing written\n", printer.Escape(dir))
		return nil
	}
	tbl := printer.NewTable(a.Stdout, "CERTIFICATE", "KEY", "NAME", "ROLES", "NOT-AFTER")
	for _, w := range written {
		tbl.Row(w.CertFile, w.KeyFile, w.Cert.Subject.CommonName, roles(w), notAfter(w))
	}
	if err := tbl.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.Stdout, "\nEach certificate is valid for %s. Give a process its NAME.crt, NAME.key and %s (docs/security.md).\n",
		printer.Escape(strings.Join(hostList, ", ")), printer.Escape(filepath.Join(dir, certs.CAName+".crt")))
	return nil
}

// share gives the files written to the owner of dir when batonctl runs as
// root, so that a directory a user made (compose's bind-mounted ./certs,
// written by a one-shot container as root) stays that user's, and makes
// the services' keys readable by keyGroup when it is set (>= 0).
func share(dir string, written []certs.Written, keyGroup int) error {
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		if u, g, ok := ownerOf(dir); ok && u != 0 {
			uid, gid = u, g
		}
	}
	var groupKeys []string
	if keyGroup >= 0 {
		gid, groupKeys = keyGroup, certs.ServiceNames()
	}
	if uid == -1 && gid == -1 {
		return nil
	}
	return certs.Share(written, uid, gid, groupKeys)
}

// certsIssueFlags are certs issue's flags.
type certsIssueFlags struct {
	dir, name, roles, hosts string
	days                    int
	force                   bool
}

func setupCertsIssue(fs *flag.FlagSet, a *app) runFunc {
	var o certsIssueFlags
	fs.StringVar(&o.dir, "dir", "", "the directory of the CA (ca.crt, ca.key) and of the files written (required)")
	fs.StringVar(&o.name, "name", "", "the certificate's name: its subject CN, and NAME.crt, NAME.key (required)")
	fs.StringVar(&o.roles, "roles", "", "comma-separated roles, written baton:<role> ("+strings.Join(tlsfiles.KnownRoles(), ", ")+")")
	fs.StringVar(&o.hosts, "hosts", "", "comma-separated DNS names and IP addresses it is valid for as a server (none by default)")
	fs.IntVar(&o.days, "days", certs.DefaultDays, "how many days it is valid")
	fs.BoolVar(&o.force, "force", false, "replace NAME.crt and NAME.key if they exist")
	return func(_ context.Context, pos []string) error { return certsIssue(a, pos, o) }
}

// certsIssue issues one more certificate from the CA in o.dir.
func certsIssue(a *app, pos []string, o certsIssueFlags) error {
	const use = "usage: batonctl certs issue --dir DIR --name NAME [--roles R,…] [--hosts H,…] [--days N] [--force]"
	switch {
	case len(pos) > 0:
		return usagef("certs issue takes no arguments, only flags: %q (%s)", pos[0], use)
	case o.dir == "":
		return usagef("--dir is required (%s)", use)
	case o.name == "":
		return usagef("--name is required (%s)", use)
	}
	if err := certs.ValidateName(o.name); err != nil {
		return usagef("--name: %v", err)
	}
	roleList := flagenv.SplitList(o.roles)
	for _, r := range roleList {
		if err := certs.ValidateRole(r); err != nil {
			return usagef("--roles: %v", err)
		}
	}
	hostList, err := hostsFlag(o.hosts)
	if err != nil {
		return err
	}
	if err := certs.ValidateDays(o.days); err != nil {
		return usagef("--days: %v", err)
	}
	for _, r := range roleList {
		if !slices.Contains(tlsfiles.KnownRoles(), r) {
			fmt.Fprintf(a.Stderr, "note: role %q is none of %s: it grants only what a policy file that names it grants\n",
				r, strings.Join(tlsfiles.KnownRoles(), ", "))
		}
	}
	w, err := certs.Issue(o.dir, certs.Leaf{Name: o.name, Roles: roleList, Hosts: hostList, Days: o.days}, o.force, a.now())
	if err != nil {
		return err
	}
	tbl := printer.NewTable(a.Stdout, "CERTIFICATE", "KEY", "NAME", "ROLES", "HOSTS", "NOT-AFTER")
	tbl.Row(w.CertFile, w.KeyFile, w.Cert.Subject.CommonName, roles(w), orDash(strings.Join(hostList, ",")), notAfter(w))
	return tbl.Flush()
}

// hostsFlag splits and checks a --hosts value.
func hostsFlag(v string) ([]string, error) {
	list := flagenv.SplitList(v)
	for _, h := range list {
		if err := certs.ValidateHost(h); err != nil {
			return nil, usagef("--hosts: %v", err)
		}
	}
	return list, nil
}

// roles is the ROLES cell of a certificate written: its identity's roles.
func roles(w certs.Written) string {
	if w.Cert.IsCA {
		return "-"
	}
	return orDash(strings.Join(tlsfiles.IdentityOf(w.Cert).Roles, ","))
}

func notAfter(w certs.Written) string { return w.Cert.NotAfter.UTC().Format(time.DateOnly) }
