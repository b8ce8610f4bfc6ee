package authz

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"gopkg.in/yaml.v3"
)

// The keys of a policy file.
const (
	keyAllow   = "allow"
	keyRoles   = "roles"
	keyMethods = "methods"
	keyQueues  = "queues"
	keyPaths   = "paths"

	keyLimits        = "limits"
	keyWaitingLeases = "waiting_leases"
)

// MaxPolicyBytes bounds a policy file: a policy is a page of rules, and a
// bound keeps a wrong path (a log, a device) from being read whole.
const MaxPolicyBytes = 1 << 20

// Load reads and parses the policy file of --authz-policy. Its errors name
// the file, and the line of what is wrong in it.
func Load(file string) (*Policy, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("authz: policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("authz: policy %s: %w", file, err)
	}
	return parse(data, "policy "+file)
}

// Parse parses a policy file's contents (see the package doc for the
// format). Its errors name the line of what is wrong.
func Parse(data []byte) (*Policy, error) { return parse(data, "policy") }

func parse(data []byte, name string) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("authz: %s: larger than %d bytes", name, MaxPolicyBytes)
	}
	raw, rawLimits, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("authz: %s: %w", name, err)
	}
	p, err := compile(raw)
	if err != nil {
		return nil, fmt.Errorf("authz: %s: %w", name, err)
	}
	if p.limits, err = checkLimits(rawLimits); err != nil {
		return nil, fmt.Errorf("authz: %s: %w", name, err)
	}
	return p, nil
}

// decode reads a policy file's rules and limits as written, with their
// lines.
func decode(data []byte) ([]rawRule, []rawLimit, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, errors.New("the file is empty: a policy is a mapping with the key allow")
		}
		return nil, nil, err // yaml's errors say "yaml: line N: …"
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("line %d: a second YAML document: a policy is one", more.Line)
	}
	if len(doc.Content) != 1 {
		return nil, nil, fmt.Errorf("line %d: a policy is a mapping with the key allow", doc.Line)
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("line %d: a policy is a mapping with the key allow, not %s", top.Line, kindName(top))
	}
	var allow, limits *yaml.Node
	var allowKey, limitsKey *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if err := checkKey(k); err != nil {
			return nil, nil, err
		}
		var dst, dstKey **yaml.Node
		switch k.Value {
		case keyAllow:
			dst, dstKey = &allow, &allowKey
		case keyLimits:
			dst, dstKey = &limits, &limitsKey
		default:
			return nil, nil, fmt.Errorf("line %d: unknown key %q (a policy has the keys allow and limits)", k.Line, k.Value)
		}
		if *dstKey != nil {
			return nil, nil, fmt.Errorf("line %d: %s is given twice (first at line %d)", k.Line, k.Value, (*dstKey).Line)
		}
		*dst, *dstKey = v, k
	}
	if allow == nil {
		return nil, nil, fmt.Errorf("line %d: the policy has no key allow", top.Line)
	}
	if allow.Kind != yaml.SequenceNode {
		return nil, nil, fmt.Errorf("line %d: allow is a list of rules, not %s", allow.Line, kindName(allow))
	}
	rules := make([]rawRule, 0, len(allow.Content))
	for _, n := range allow.Content {
		r, err := decodeRule(n)
		if err != nil {
			return nil, nil, err
		}
		rules = append(rules, r)
	}
	if limits == nil {
		return rules, nil, nil
	}
	if limits.Kind != yaml.SequenceNode {
		return nil, nil, fmt.Errorf("line %d: limits is a list of limits, as - {roles: [worker], waiting_leases: 16}, not %s", limits.Line, kindName(limits))
	}
	if len(limits.Content) == 0 {
		return nil, nil, fmt.Errorf("line %d: limits is an empty list: name at least one, or leave limits out", limitsKey.Line)
	}
	lims := make([]rawLimit, 0, len(limits.Content))
	for _, n := range limits.Content {
		l, err := decodeLimit(n)
		if err != nil {
			return nil, nil, err
		}
		lims = append(lims, l)
	}
	return rules, lims, nil
}

// decodeRule reads one rule of allow.
func decodeRule(n *yaml.Node) (rawRule, error) {
	if n.Kind != yaml.MappingNode {
		return rawRule{}, fmt.Errorf("line %d: a rule is a mapping with roles and methods, paths or both, not %s", n.Line, kindName(n))
	}
	r := rawRule{pos: fmt.Sprintf("line %d", n.Line)}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := checkKey(k); err != nil {
			return rawRule{}, err
		}
		var dst *[]field
		switch k.Value {
		case keyRoles:
			dst = &r.roles
		case keyMethods:
			dst = &r.methods
		case keyQueues:
			dst = &r.queues
		case keyPaths:
			dst = &r.paths
		default:
			return rawRule{}, fmt.Errorf("line %d: unknown key %q in a rule (a rule has roles, methods, queues and paths)", k.Line, k.Value)
		}
		if first, ok := seen[k.Value]; ok {
			return rawRule{}, fmt.Errorf("line %d: %s is given twice in the rule (first at line %d)", k.Line, k.Value, first)
		}
		seen[k.Value] = k.Line
		list, err := decodeList(k.Value, v)
		if err != nil {
			return rawRule{}, err
		}
		if len(list) == 0 {
			r.empty = append(r.empty, field{val: k.Value, pos: fmt.Sprintf("line %d", k.Line)})
		}
		*dst = list
	}
	return r, nil
}

// decodeLimit reads one limit of limits.
func decodeLimit(n *yaml.Node) (rawLimit, error) {
	if n.Kind != yaml.MappingNode {
		return rawLimit{}, fmt.Errorf("line %d: a limit is a mapping with roles and waiting_leases, not %s", n.Line, kindName(n))
	}
	l := rawLimit{pos: fmt.Sprintf("line %d", n.Line)}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := checkKey(k); err != nil {
			return rawLimit{}, err
		}
		if k.Value != keyRoles && k.Value != keyWaitingLeases {
			return rawLimit{}, fmt.Errorf("line %d: unknown key %q in a limit (a limit has roles and waiting_leases)", k.Line, k.Value)
		}
		if first, ok := seen[k.Value]; ok {
			return rawLimit{}, fmt.Errorf("line %d: %s is given twice in the limit (first at line %d)", k.Line, k.Value, first)
		}
		seen[k.Value] = k.Line
		if k.Value == keyWaitingLeases {
			// A number too large for an int is !!float to YAML: let
			// checkLimits say it is out of range.
			if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
				return rawLimit{}, fmt.Errorf("line %d: waiting_leases is a whole number, as 16, not %s", v.Line, kindName(v))
			}
			l.waitingLeases = &field{val: v.Value, pos: fmt.Sprintf("line %d", v.Line)}
			continue
		}
		list, err := decodeList(k.Value, v)
		if err != nil {
			return rawLimit{}, err
		}
		if len(list) == 0 {
			return rawLimit{}, fmt.Errorf("line %d: roles is an empty list: name at least one", k.Line)
		}
		l.roles = list
	}
	return l, nil
}

// decodeList reads a list of strings, as [a, b] or one "- a" a line.
func decodeList(key string, n *yaml.Node) ([]field, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: %s is a list, as [a, b], not %s", n.Line, key, kindName(n))
	}
	out := make([]field, 0, len(n.Content))
	for _, item := range n.Content {
		if item.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: each of %s is a string, not %s", item.Line, key, kindName(item))
		}
		out = append(out, field{val: item.Value, pos: fmt.Sprintf("line %d", item.Line)})
	}
	return out, nil
}

// checkKey refuses a mapping key that is not a plain string: a policy's
// keys are its few words.
func checkKey(k *yaml.Node) error {
	if k.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a key is a word (allow, roles, methods, queues, paths, limits, waiting_leases), not %s", k.Line, kindName(k))
	}
	return nil
}

// kindName names a node's kind in messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias (a policy has no anchors or aliases)"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the value %q", n.Value)
	default:
		return "a document"
	}
}

// Marshal returns the policy as a policy file: Parse of it returns an equal
// Policy.
func (p *Policy) Marshal() []byte {
	allow := &yaml.Node{Kind: yaml.SequenceNode}
	for _, r := range p.rules {
		rule := &yaml.Node{Kind: yaml.MappingNode}
		add := func(key string, vals []string, flow bool) {
			if len(vals) == 0 {
				return
			}
			list := &yaml.Node{Kind: yaml.SequenceNode}
			if flow {
				list.Style = yaml.FlowStyle
			}
			for _, v := range vals {
				list.Content = append(list.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
			}
			rule.Content = append(rule.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, list)
		}
		add(keyRoles, r.Roles, true)
		add(keyMethods, r.Methods, false)
		add(keyQueues, r.Queues, true)
		add(keyPaths, r.Paths, false)
		allow.Content = append(allow.Content, rule)
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: keyAllow}, allow,
	}}
	if len(p.limits) > 0 {
		limits := &yaml.Node{Kind: yaml.SequenceNode}
		for _, l := range p.limits {
			roles := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, r := range l.Roles {
				roles.Content = append(roles.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: r})
			}
			limits.Content = append(limits.Content, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
				{Kind: yaml.ScalarNode, Tag: "!!str", Value: keyRoles}, roles,
				{Kind: yaml.ScalarNode, Tag: "!!str", Value: keyWaitingLeases},
				{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(l.WaitingLeases)},
			}})
		}
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: keyLimits}, limits)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		// Every value is a checked string of a role, method, queue or path.
		panic("authz: marshal policy: " + err.Error())
	}
	if err := enc.Close(); err != nil {
		panic("authz: marshal policy: " + err.Error())
	}
	return b.Bytes()
}
