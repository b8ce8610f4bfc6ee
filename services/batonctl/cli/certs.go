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

const certsUsage = "usage: batonctl certs init DIR [--hosts H,…] [--days N] [--ca-days N] [--force|--keep] [--key-group GID] | " +
	"batonctl certs issue --dir DIR --name NAME [--roles R,…] [--hosts H,…] [--days N] [--force]"

// cmdCerts makes a deployment's certificates (package certs): init a CA
// and one certificate per service and kind of user, issue one more.
func cmdCerts(_ context.Context, a *app, args []string) error {
	if len(args) == 0 {
		return usagef(certsUsage)
	}
	switch args[0] {
	case "init":
		return certsInit(a, args[1:])
	case "issue":
		return certsIssue(a, args[1:])
	}
	return usagef("unknown certs command %q (%s)", args[0], certsUsage)
}

func certsInit(a *app, args []string) error {
	fs := flag.NewFlagSet("certs init", flag.ContinueOnError)
	hosts := fs.String("hosts", strings.Join(certs.DefaultHosts(), ","), "comma-separated DNS names and IP addresses every certificate is valid for")
	days := fs.Int("days", certs.DefaultDays, "how many days each service's certificate is valid")
	caDays := fs.Int("ca-days", certs.DefaultCADays, "how many days the CA is valid")
	force := fs.Bool("force", false, "replace files that exist")
	keep := fs.Bool("keep", false, "keep the CA and every certificate in DIR, and issue only those missing (for a one-shot that runs at every start)")
	keyGroup := fs.Int("key-group", -1, "make the services' keys ("+strings.Join(certs.ServiceNames(), ", ")+") readable by this group (0640), for services that run as another user of it; the CA's and the users' keys stay 0600")
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("usage: batonctl certs init DIR [--hosts H,…] [--days N] [--ca-days N] [--force|--keep] [--key-group GID]")
	}
	if *force && *keep {
		return usagef("--force replaces every file and --keep none: give one")
	}
	if *keyGroup < -1 {
		return usagef("--key-group %d: a group id is 0 or more", *keyGroup)
	}
	dir := pos[0]
	hostList, err := hostsFlag(*hosts)
	if err != nil {
		return err
	}
	if len(hostList) == 0 {
		return usagef("--hosts is empty: the services' certificates need the names they are reached by (default %s)", strings.Join(certs.DefaultHosts(), ","))
	}
	if err := certs.ValidateDays(*days); err != nil {
		return usagef("--days: %v", err)
	}
	if err := certs.ValidateDays(*caDays); err != nil {
		return usagef("--ca-days: %v", err)
	}
	if *days > *caDays {
		return usagef("--days %d is longer than the CA's --ca-days %d", *days, *caDays)
	}
	now := a.now()
	leaves := certs.Defaults(hostList, *days)
	var written []certs.Written
	if *keep {
		written, err = certs.Complete(dir, *caDays, leaves, now)
	} else {
		var ca *certs.CA
		if ca, err = certs.NewCA(*caDays, now); err == nil {
			written, err = certs.Init(dir, ca, leaves, *force, now)
		}
	}
	if err == nil {
		err = share(dir, written, *keyGroup)
	}
	if err != nil {
		return err
	}
	if len(written) == 0 {
		fmt.Fprintf(a.Stdout, "%s holds the CA and every certificate already: nothing written\n", dir)
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
		strings.Join(hostList, ", "), filepath.Join(dir, certs.CAName+".crt"))
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

func certsIssue(a *app, args []string) error {
	fs := flag.NewFlagSet("certs issue", flag.ContinueOnError)
	dir := fs.String("dir", "", "the directory of the CA (ca.crt, ca.key) and of the files written (required)")
	name := fs.String("name", "", "the certificate's name: its subject CN, and NAME.crt, NAME.key (required)")
	roleFlag := fs.String("roles", "", "comma-separated roles, written baton:<role> ("+strings.Join(tlsfiles.KnownRoles(), ", ")+")")
	hosts := fs.String("hosts", "", "comma-separated DNS names and IP addresses it is valid for as a server (none by default)")
	days := fs.Int("days", certs.DefaultDays, "how many days it is valid")
	force := fs.Bool("force", false, "replace NAME.crt and NAME.key if they exist")
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	const use = "usage: batonctl certs issue --dir DIR --name NAME [--roles R,…] [--hosts H,…] [--days N] [--force]"
	switch {
	case len(pos) > 0:
		return usagef("certs issue takes no arguments, only flags: %q (%s)", pos[0], use)
	case *dir == "":
		return usagef("--dir is required (%s)", use)
	case *name == "":
		return usagef("--name is required (%s)", use)
	}
	if err := certs.ValidateName(*name); err != nil {
		return usagef("--name: %v", err)
	}
	roleList := flagenv.SplitList(*roleFlag)
	for _, r := range roleList {
		if err := certs.ValidateRole(r); err != nil {
			return usagef("--roles: %v", err)
		}
	}
	hostList, err := hostsFlag(*hosts)
	if err != nil {
		return err
	}
	if err := certs.ValidateDays(*days); err != nil {
		return usagef("--days: %v", err)
	}
	for _, r := range roleList {
		if !slices.Contains(tlsfiles.KnownRoles(), r) {
			fmt.Fprintf(a.Stderr, "note: role %q is none of %s: it grants only what a policy file that names it grants\n",
				r, strings.Join(tlsfiles.KnownRoles(), ", "))
		}
	}
	w, err := certs.Issue(*dir, certs.Leaf{Name: *name, Roles: roleList, Hosts: hostList, Days: *days}, *force, a.now())
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
