package stack

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

// The monitoring files of deploy/monitoring and the runbooks they link to.
var (
	monitoringDir = filepath.Join("..", "..", "..", "deploy", "monitoring")
	rulesFile     = filepath.Join(monitoringDir, "baton-rules.yaml")
	dashboardFile = filepath.Join(monitoringDir, "grafana-dashboard.json")
	operationsDoc = filepath.Join("..", "..", "..", "docs", "operations.md")
)

// runbookURLPrefix is how every alert's runbook_url starts: the runbooks'
// page, relative to the repository's root.
const runbookURLPrefix = "docs/operations.md#"

// targetLabels are the labels Prometheus gives every series it scrapes;
// the services do not export them.
var targetLabels = setOf("job", "instance")

// prometheusOwn are the series Prometheus records itself for each target.
var prometheusOwn = map[string]map[string]bool{"up": targetLabels}

type promRule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []promRule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string     `yaml:"name"`
			Rules []promRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []promRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return rules
}

// expression is one PromQL expression of the monitoring files, and where it is.
type expression struct {
	where string
	expr  string
	// label, for a Grafana variable's label_values(selector, label): the
	// label whose values it lists.
	label string
}

// labelValues is Grafana's variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// dashboardExpressions returns every query of the dashboard: its panels'
// targets (at any depth) and its variables' queries.
func dashboardExpressions(t *testing.T) []expression {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []expression
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				where = title
			}
			for k, c := range v {
				if k == "expr" {
					if s, ok := c.(string); ok {
						out = append(out, expression{where: "panel " + where, expr: s})
					}
					continue
				}
				walk(c, where)
			}
		case []any:
			for _, c := range v {
				walk(c, where)
			}
		}
	}
	walk(d["panels"], "")
	templating, _ := d["templating"].(map[string]any)
	vars, _ := templating["list"].([]any)
	for _, v := range vars {
		v, _ := v.(map[string]any)
		if v["type"] != "query" {
			continue
		}
		q, ok := v["query"].(string)
		if m, isMap := v["query"].(map[string]any); isMap {
			q, ok = m["query"].(string)
		}
		if !ok {
			t.Errorf("%s: variable %v has no query", dashboardFile, v["name"])
			continue
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("%s: variable %v: %q is not label_values(selector, label)", dashboardFile, v["name"], q)
			continue
		}
		out = append(out, expression{where: fmt.Sprintf("variable %v", v["name"]), expr: m[1], label: m[2]})
	}
	if len(out) == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}
	return out
}

// exported is what the services' /metrics hold: for each sample name
// (a histogram's _bucket, _sum and _count), its labels and their values.
type exported map[string]map[string]map[string]bool

func (e exported) add(name string, labels []*dto.LabelPair, extra ...string) {
	if e[name] == nil {
		e[name] = map[string]map[string]bool{}
	}
	set := func(l, v string) {
		if e[name][l] == nil {
			e[name][l] = map[string]bool{}
		}
		e[name][l][v] = true
	}
	for _, l := range labels {
		set(l.GetName(), l.GetValue())
	}
	for i := 0; i+1 < len(extra); i += 2 {
		set(extra[i], extra[i+1])
	}
}

// scrape reads the /metrics of every address into one exported.
func scrape(addrs ...string) (exported, error) {
	e := exported{}
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			return nil, err
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s/metrics: %w", a, err)
		}
		for name, f := range fams {
			for _, m := range f.GetMetric() {
				switch f.GetType() {
				case dto.MetricType_HISTOGRAM:
					for _, b := range m.GetHistogram().GetBucket() {
						e.add(name+"_bucket", m.GetLabel(), "le", model.FloatString(b.GetUpperBound()).String())
					}
					e.add(name+"_bucket", m.GetLabel(), "le", "+Inf")
					e.add(name+"_sum", m.GetLabel())
					e.add(name+"_count", m.GetLabel())
				case dto.MetricType_SUMMARY:
					e.add(name, m.GetLabel(), "quantile", "")
					e.add(name+"_sum", m.GetLabel())
					e.add(name+"_count", m.GetLabel())
				default:
					e.add(name, m.GetLabel())
				}
			}
		}
	}
	return e, nil
}

// literalAlternatives matches a regexp that is only literal alternatives,
// such as "Add|Ack|Forget", whose every value can be checked.
var literalAlternatives = regexp.MustCompile(`^[A-Za-z0-9_./ -]+(\|[A-Za-z0-9_./ -]+)*$`)

// checker finds the names of the monitoring files' expressions that the
// services do not export.
type checker struct {
	have exported
	// recorded are the recording rules' names and the labels of their
	// series.
	recorded map[string]map[string]bool
}

// labelsOf returns the labels the series of name have, and whether name
// exists at all.
func (c checker) labelsOf(name string) (map[string]bool, bool) {
	if l, ok := c.recorded[name]; ok {
		return l, true
	}
	if l, ok := prometheusOwn[name]; ok {
		return l, true
	}
	ls, ok := c.have[name]
	if !ok {
		return nil, false
	}
	out := map[string]bool{}
	for l := range ls {
		out[l] = true
	}
	for l := range targetLabels {
		out[l] = true
	}
	return out, true
}

// problems returns what is wrong with e: names that do not exist, labels
// that the metric lacks, literal label values never exported.
func (c checker) problems(e expression) []string {
	refs, err := parsePromQL(e.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v in %q", e.where, err, e.expr)}
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range refs.selectors {
		if s.name == "" {
			out = append(out, fmt.Sprintf("%s: a selector without a metric name", e.where))
			continue
		}
		labels, ok := c.labelsOf(s.name)
		if !ok {
			out = append(out, fmt.Sprintf("%s: %s is exported by no service", e.where, s.name))
			continue
		}
		for l := range labels {
			seen[l] = true
		}
		for _, m := range s.matchers {
			if m.label == "__name__" {
				continue
			}
			if !labels[m.label] {
				out = append(out, fmt.Sprintf("%s: %s has no label %s", e.where, s.name, m.label))
				continue
			}
			values := c.have[s.name][m.label]
			if values == nil || strings.Contains(m.value, "$") {
				continue // a recording rule's, a target label's, or a Grafana variable
			}
			switch {
			case m.op == "=" || m.op == "!=":
				if !values[m.value] {
					out = append(out, fmt.Sprintf("%s: %s never has %s=%q", e.where, s.name, m.label, m.value))
				}
			case literalAlternatives.MatchString(m.value):
				for _, v := range strings.Split(m.value, "|") {
					if !values[v] {
						out = append(out, fmt.Sprintf("%s: %s never has %s=%q (of %s%s%q)", e.where, s.name, m.label, v, m.label, m.op, m.value))
					}
				}
			}
		}
	}
	if len(out) > 0 {
		return out // the labels of a missing metric are not known
	}
	grouping := refs.grouping
	if e.label != "" {
		grouping = append(grouping, e.label)
	}
	for _, l := range grouping {
		if !seen[l] {
			out = append(out, fmt.Sprintf("%s: no metric of %q has the label %s", e.where, e.expr, l))
		}
	}
	return out
}

// recordedLabels returns the labels of each recording rule's series: the
// labels its expression groups by, or where it groups by none, those of
// the series it reads (a recording rule read by a later one counts with
// its own).
func recordedLabels(t *testing.T, rules []promRule, have exported) map[string]map[string]bool {
	t.Helper()
	rec := map[string]map[string]bool{}
	c := checker{have: have, recorded: rec}
	for _, r := range rules {
		if r.Record == "" {
			continue
		}
		refs, err := parsePromQL(r.Expr)
		if err != nil {
			t.Fatalf("record %s: %v", r.Record, err)
		}
		labels := setOf(refs.grouping...)
		if len(labels) == 0 {
			for _, s := range refs.selectors {
				ls, _ := c.labelsOf(s.name)
				for l := range ls {
					labels[l] = true
				}
			}
		}
		rec[r.Record] = labels
	}
	return rec
}

// TestMonitoringNamesExist starts the embedded stack, with its queue as a
// replicated member so that the Raft metrics exist, applies a Deployment so
// that every queue, observer and worker series is made, and checks that
// every metric, label and literal label value that the rules file and the
// Grafana dashboard read is one the running services export on /metrics.
// A histogram is read through its _bucket, _sum and _count; the names of
// the rules file's recording rules count as existing; so does up, which
// Prometheus records itself.
func TestMonitoringNamesExist(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	rules := loadRules(t)
	var exprs []expression
	for _, r := range rules {
		name := "record " + r.Record
		if r.Alert != "" {
			name = "alert " + r.Alert
		}
		exprs = append(exprs, expression{where: filepath.Base(rulesFile) + ": " + name, expr: r.Expr})
	}
	for _, e := range dashboardExpressions(t) {
		e.where = filepath.Base(dashboardFile) + ": " + e.where
		exprs = append(exprs, e)
	}

	s := startStack(t, t.TempDir(), func(c *Config) {
		// A replicated queue of one member: the Raft metrics are exported
		// as on every member of three.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		peer := l.Addr().String()
		l.Close()
		c.Queue.Name, c.Queue.PeerAddr, c.Queue.InitialCluster = "queue-0", peer, "queue-0="+peer
	})
	s.mustCtl(t, "apply", "-f", filepath.Join(examples, "deployment.yaml"))

	// Series labelled by queue appear as the queues fill: wait until
	// nothing is missing, or report what still is.
	var missing []string
	var have exported
	deadline := time.Now().Add(90 * time.Second)
	for {
		var err error
		if have, err = scrape(s.ep.QueueHTTP, s.ep.ObserverHTTP, s.ep.WorkerHTTP); err != nil {
			t.Fatal(err)
		}
		c := checker{have: have, recorded: recordedLabels(t, rules, have)}
		missing = missing[:0]
		for _, e := range exprs {
			missing = append(missing, c.problems(e)...)
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	sort.Strings(missing)
	for _, m := range slices.Compact(missing) {
		t.Error(m)
	}

	// The check itself, on what was scraped: a misspelt metric, label or
	// value must be found.
	c := checker{have: have, recorded: recordedLabels(t, rules, have)}
	for _, bad := range []string{
		`baton_queue_dept`,
		`max by (queue) (baton_queue_depth{queue_name="pods"})`,
		`baton_queue_items{state="parkd"}`,
		`grpc_server_handled_total{grpc_method=~"Add|Akc"}`,
		`sum by (controller) (baton_queue_depth)`,
		`job_queue:baton_queue_depth:max{state="pending"}`,
		`grpc_server_handling_seconds`,
	} {
		if len(c.problems(expression{where: "control", expr: bad})) == 0 {
			t.Errorf("%q passed the check; it names what no service exports", bad)
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestMonitoringRulesAreDocumentedAndTested: every alert has a severity,
// a summary, a description and a runbook_url whose anchor is its own
// section under docs/operations.md's Runbooks (and every section there is
// an alert's); and every alert has promtool tests in which it fires and in
// which it does not.
func TestMonitoringRulesAreDocumentedAndTested(t *testing.T) {
	rules := loadRules(t)

	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	runbooks := map[string]string{} // anchor → heading
	inRunbooks := false
	for line := range strings.SplitSeq(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inRunbooks = strings.TrimSpace(line[3:]) == "Runbooks"
		case inRunbooks && strings.HasPrefix(line, "### "):
			h := strings.TrimSpace(line[4:])
			runbooks[githubAnchor(h)] = h
		}
	}
	if len(runbooks) == 0 {
		t.Fatalf("%s has no sections under ## Runbooks", operationsDoc)
	}

	alerts := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		if sev := r.Labels["severity"]; sev != "page" && sev != "ticket" {
			t.Errorf("alert %s: severity %q, want page or ticket", r.Alert, sev)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("alert %s has no %s", r.Alert, a)
			}
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookURLPrefix)
		if !ok {
			t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, r.Annotations["runbook_url"], runbookURLPrefix)
			continue
		}
		if h, ok := runbooks[anchor]; !ok || h != r.Alert {
			t.Errorf("alert %s: runbook_url's anchor #%s is not a section of %s's Runbooks named %s", r.Alert, anchor, operationsDoc, r.Alert)
		}
	}
	for _, h := range runbooks {
		if !alerts[h] {
			t.Errorf("%s: runbook %q is no alert's", operationsDoc, h)
		}
	}

	// The promtool tests: in which of them each alert fires, and in which
	// it does not.
	files, err := filepath.Glob(filepath.Join(monitoringDir, "tests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests in %s/tests (%v)", monitoringDir, err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tf struct {
			RuleFiles []string `yaml:"rule_files"`
			Tests     []struct {
				AlertRuleTest []struct {
					Alertname string           `yaml:"alertname"`
					ExpAlerts []map[string]any `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(b, &tf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Equal(tf.RuleFiles, []string{"../" + filepath.Base(rulesFile)}) {
			t.Errorf("%s: rule_files %q, want the rules file alone", f, tf.RuleFiles)
		}
		for _, g := range tf.Tests {
			for _, a := range g.AlertRuleTest {
				if !alerts[a.Alertname] {
					t.Errorf("%s: tests %s, which is no alert", f, a.Alertname)
				}
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	for a := range alerts {
		if !fires[a] {
			t.Errorf("alert %s has no promtool test in which it fires", a)
		}
		if !quiet[a] {
			t.Errorf("alert %s has no promtool test in which it does not fire", a)
		}
	}
}
