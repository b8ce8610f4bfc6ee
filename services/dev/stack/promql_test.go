package stack

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

// What the monitoring tests need from a PromQL expression is the names it
// reads: each selector's metric name and label matchers, and the labels its
// by, without, on, ignoring and group_* clauses name. Prometheus's own
// parser (github.com/prometheus/prometheus/promql/parser) would give them,
// but its module requires some 250 others and, by minimal version
// selection, would move dependencies this module shares with etcd and grpc
// (opentelemetry among them) for every engineer who builds it. The
// expressions' syntax is promtool's to check (`promtool check rules`,
// scripts/monitoring.sh); this reader only has to find the names, which
// PromQL's grammar makes plain: a name followed by "(", or an aggregation
// followed by by or without (sum by (job) (…)), is a function or an
// aggregation (it must be one PromQL knows, so a misspelt function is an
// error here, not a metric); the names after by, without, on, ignoring and
// group_* are a label list; one inside {...} is a label; anything in "..."
// or [...] is a value or a duration; every other name is a metric. Grafana's
// variables ($queue, $__rate_interval) are read as values.

// selector is one metric selector of an expression.
type selector struct {
	name     string // "" for {…} without one
	matchers []matcher
}

// matcher is one label matcher of a selector: label op "value".
type matcher struct {
	label, op, value string
}

// promRefs is what an expression reads.
type promRefs struct {
	selectors []selector
	grouping  []string // labels named by by, without, on, ignoring, group_left, group_right
}

// promFunctions are PromQL's functions and aggregation operators.
var promFunctions = setOf(
	// Aggregations.
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio",
	// Functions.
	"abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
	"avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
	"count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
	"delta", "deriv", "double_exponential_smoothing", "exp", "floor", "histogram_avg",
	"histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
	"histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate",
	"label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time",
	"max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
	"present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn",
	"sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt",
	"stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp",
	"vector", "year",
)

// promGroupings are the keywords followed by a list of labels.
var promGroupings = setOf("by", "without", "on", "ignoring", "group_left", "group_right")

// promKeywords are the other words that are not metric names.
var promKeywords = setOf("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end")

func setOf(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// token is one lexical token: kind is 'i' (identifier), 's' (string, its
// text unquoted), 'n' (number or duration), '$' (a Grafana variable), or the
// punctuation or operator itself.
type token struct {
	kind string
	text string
}

func lexPromQL(expr string) ([]token, error) {
	var toks []token
	rs := []rune(expr)
	isIdent := func(r rune, first bool) bool {
		return r == '_' || r == ':' || unicode.IsLetter(r) || (!first && unicode.IsDigit(r))
	}
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '#': // a comment, to the end of the line
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case r == '"' || r == '\'' || r == '`':
			var b strings.Builder
			j := i + 1
			for ; j < len(rs) && rs[j] != r; j++ {
				if rs[j] == '\\' && r != '`' && j+1 < len(rs) {
					j++
				}
				b.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, token{"s", b.String()})
			i = j + 1
		case r == '$': // $name, ${name} or ${name:format}
			j := i + 1
			if j < len(rs) && rs[j] == '{' {
				for j < len(rs) && rs[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(rs) && isIdent(rs[j], false) {
					j++
				}
			}
			toks = append(toks, token{"$", string(rs[i:min(j, len(rs))])})
			i = j
		case unicode.IsDigit(r) || (r == '.' && i+1 < len(rs) && unicode.IsDigit(rs[i+1])):
			j := i
			for j < len(rs) && (unicode.IsDigit(rs[j]) || unicode.IsLetter(rs[j]) || rs[j] == '.' ||
				((rs[j] == '+' || rs[j] == '-') && (rs[j-1] == 'e' || rs[j-1] == 'E'))) {
				j++
			}
			toks = append(toks, token{"n", string(rs[i:j])})
			i = j
		case isIdent(r, true):
			j := i
			for j < len(rs) && isIdent(rs[j], false) {
				j++
			}
			toks = append(toks, token{"i", string(rs[i:j])})
			i = j
		default:
			op := string(r)
			if i+1 < len(rs) {
				if two := string(rs[i : i+2]); two == "!=" || two == "=~" || two == "!~" || two == "==" || two == "<=" || two == ">=" {
					op = two
				}
			}
			toks = append(toks, token{op, op})
			i += len([]rune(op))
		}
	}
	return toks, nil
}

// parsePromQL returns the names expr reads; it fails on a function PromQL
// does not have and on a selector it cannot read.
func parsePromQL(expr string) (promRefs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return promRefs{}, err
	}
	var refs promRefs
	next := func(i int) string {
		if i+1 < len(toks) {
			return toks[i+1].kind
		}
		return ""
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == "[": // a range or a subquery: durations
			for i < len(toks) && toks[i].kind != "]" {
				i++
			}
		case t.kind == "{":
			sel, end, err := parseMatchers(toks, i, "")
			if err != nil {
				return promRefs{}, err
			}
			refs.selectors = append(refs.selectors, sel)
			i = end
		case t.kind != "i":
		case promGroupings[t.text]:
			if next(i) != "(" {
				continue // group_left without labels
			}
			for i += 2; i < len(toks) && toks[i].kind != ")"; i++ {
				if toks[i].kind == "i" {
					refs.grouping = append(refs.grouping, toks[i].text)
				} else if toks[i].kind != "," {
					return promRefs{}, fmt.Errorf("%q in the labels of %s", toks[i].text, t.text)
				}
			}
		case promKeywords[t.text]:
		case promFunctions[t.text] && next(i) == "i" && (toks[i+1].text == "by" || toks[i+1].text == "without"):
			// An aggregation with its grouping first: sum by (job) (…).
		case next(i) == "(":
			if !promFunctions[t.text] {
				return promRefs{}, fmt.Errorf("%s is not a PromQL function", t.text)
			}
		case next(i) == "{":
			sel, end, err := parseMatchers(toks, i+1, t.text)
			if err != nil {
				return promRefs{}, err
			}
			refs.selectors = append(refs.selectors, sel)
			i = end
		default:
			refs.selectors = append(refs.selectors, selector{name: t.text})
		}
	}
	return refs, nil
}

// parseMatchers reads the matchers from toks[open] ("{") to its "}", and
// returns the selector and the index of the "}".
func parseMatchers(toks []token, open int, name string) (selector, int, error) {
	sel := selector{name: name}
	i := open + 1
	for ; i < len(toks) && toks[i].kind != "}"; i++ {
		if toks[i].kind == "," {
			continue
		}
		if i+2 >= len(toks) || toks[i].kind != "i" || toks[i+2].kind != "s" {
			return selector{}, 0, fmt.Errorf("cannot read the matchers of %q", name)
		}
		switch op := toks[i+1].kind; op {
		case "=", "!=", "=~", "!~":
			sel.matchers = append(sel.matchers, matcher{toks[i].text, op, toks[i+2].text})
		default:
			return selector{}, 0, fmt.Errorf("%q is no matcher operator in %q", op, name)
		}
		i += 2
	}
	if i >= len(toks) {
		return selector{}, 0, fmt.Errorf("unclosed { in %q", name)
	}
	if sel.name == "" {
		for _, m := range sel.matchers {
			if m.label == "__name__" && m.op == "=" {
				sel.name = m.value
			}
		}
	}
	return sel, i, nil
}

func TestParsePromQL(t *testing.T) {
	cases := []struct {
		expr     string
		want     promRefs
		wantFail bool
	}{
		{expr: `up`, want: promRefs{selectors: []selector{{name: "up"}}}},
		{
			expr: `sum by (job, queue) (rate(baton_queue_adds_total{job=~"$queue_job", queue!="x"}[$__rate_interval]))`,
			want: promRefs{
				selectors: []selector{{name: "baton_queue_adds_total", matchers: []matcher{{"job", "=~", "$queue_job"}, {"queue", "!=", "x"}}}},
				grouping:  []string{"job", "queue"},
			},
		},
		{
			expr: "a:b:max > on (job, queue) group_left () c offset 5m # and not_a_metric\nor sum(d) without (le) > bool 0.5e-3",
			want: promRefs{
				selectors: []selector{{name: "a:b:max"}, {name: "c"}, {name: "d"}},
				grouping:  []string{"job", "queue", "le"},
			},
		},
		{
			expr: `histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m:1m]))) and {__name__="y", state="parked"}`,
			want: promRefs{
				selectors: []selector{{name: "x_bucket"}, {name: "y", matchers: []matcher{{"__name__", "=", "y"}, {"state", "=", "parked"}}}},
				grouping:  []string{"le"},
			},
		},
		{
			expr: `label_replace(v, "dst", "$1", "src", "(.*)")`,
			want: promRefs{selectors: []selector{{name: "v"}}},
		},
		{expr: `rates(x[5m])`, wantFail: true},          // not a function
		{expr: `x{job="a"`, wantFail: true},             // unclosed
		{expr: `x{job=a}`, wantFail: true},              // a value must be a string
		{expr: `sum by (job, "q") (x)`, wantFail: true}, // a label list holds names
		{expr: `x{job="a} + y`, wantFail: true},         // unterminated string
		{expr: `max_over_time(x[10m]) > 0`, want: promRefs{selectors: []selector{{name: "x"}}}},
	}
	for _, tc := range cases {
		got, err := parsePromQL(tc.expr)
		if tc.wantFail {
			if err == nil {
				t.Errorf("parsePromQL(%q) = %+v, want an error", tc.expr, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("parsePromQL(%q): %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parsePromQL(%q)\n got %+v\nwant %+v", tc.expr, got, tc.want)
		}
	}
}
