package objects

// Admission: each write of a kind whose schema the Client knows gets the
// schema's defaults and is checked (ErrInvalid), the schemas read from
// the declarations in etcd; and metadata.generation, which the Client owns.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrInvalid is returned (wrapped, with every field error:
// errors.As(err, new(*schema.Errors))) when a write is refused because the
// object does not satisfy its kind's schema. Nothing was written; the same
// object would be refused again, so a reconcile that meets it has a bug or
// a bad spec to report (reconcile.Terminal).
var ErrInvalid = schema.ErrInvalid

// SchemaMaxAge bounds how old a Client's knowledge of the declared kinds'
// schemas may be when it writes an object of a declared kind: older, it
// reads the declarations in etcd again before the write.
const SchemaMaxAge = 10 * time.Second

// schemas is what a Client knows of the declared kinds' schemas, read
// from the declarations in etcd (kinds.DeclarationPrefix) at most
// SchemaMaxAge ago.
type schemas struct {
	mu     sync.Mutex
	readAt time.Time
	// byResource holds the validator of each declared kind with a schema.
	byResource map[string]*schema.Validator
	// compiled keeps each declaration's validator by key and mod revision,
	// so a read that finds a declaration unchanged does not compile it
	// again.
	compiled map[string]compiledDeclaration
}

type compiledDeclaration struct {
	modRev int64
	v      *schema.Validator
}

// resourceOf is the resource of an object key, /registry/<resource>/….
func resourceOf(key string) string {
	rest, ok := strings.CutPrefix(key, kinds.RegistryPrefix)
	if !ok {
		return ""
	}
	resource, _, _ := strings.Cut(rest, "/")
	return resource
}

// validator returns the validator of the objects at key: a reference
// kind's, a declared kind's schema, or nil when no schema is known (the
// object is written unchecked, as before schemas).
func (s *Client) validator(ctx context.Context, key string) (*schema.Validator, error) {
	resource := resourceOf(key)
	if v, ok := kinds.BuiltinValidator(resource); ok {
		return v, nil
	}
	if resource == "" {
		return nil, nil
	}
	c := &s.schemas
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byResource == nil || time.Since(c.readAt) > SchemaMaxAge {
		if err := s.readSchemas(ctx); err != nil {
			return nil, fmt.Errorf("read the declared kinds' schemas: %w", err)
		}
	}
	return c.byResource[resource], nil
}

// readSchemas reads every declaration, as the observer and batonctl do:
// one that does not parse is skipped, and a resource's schema is that of
// the first declaration for it, in key order (kinds.Set). s.schemas.mu is
// held.
func (s *Client) readSchemas(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	resp, err := s.etcd.Get(ctx, kinds.DeclarationPrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	c := &s.schemas
	set := kinds.NewSet()
	compiled := map[string]compiledDeclaration{}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if have, ok := c.compiled[key]; ok && have.modRev == kv.ModRevision {
			compiled[key] = have
		}
		d, err := kinds.Parse(kv.Value)
		if err != nil || d.Key() != key {
			continue
		}
		set.Declare(d)
		if _, ok := compiled[key]; !ok && d.Schema != nil {
			v, err := d.Validator()
			if err != nil {
				continue // Parse checked the schema: not reached
			}
			compiled[key] = compiledDeclaration{modRev: kv.ModRevision, v: v}
		}
	}
	byResource := map[string]*schema.Validator{}
	for _, k := range set.All() {
		if d, ok := set.Declaration(k.Resource); ok && d.Schema != nil {
			if cd, ok := compiled[d.Key()]; ok {
				byResource[k.Resource] = cd.v
			}
		}
	}
	c.byResource, c.compiled, c.readAt = byResource, compiled, time.Now()
	return nil
}

// admit turns b, an object about to be written at key over stored (nil
// for a create), into what is written: metadata.generation 1 on a create,
// and on an update the stored one, raised by one when spec changed; and
// with the kind's schema known, its defaults filled in and every field
// checked (ErrInvalid, nothing to write).
func (s *Client) admit(ctx context.Context, key string, stored, b []byte) ([]byte, error) {
	v, err := s.validator(ctx, key)
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("decode %s: %w", key, err)
	}
	var obj map[string]any
	defaulted := false
	spec := top["spec"]
	if v != nil {
		if obj, err = decodeObject(b); err != nil {
			return nil, fmt.Errorf("decode %s: %w", key, err)
		}
		if defaulted = v.Default(obj); defaulted {
			if spec, err = json.Marshal(obj["spec"]); err != nil {
				return nil, fmt.Errorf("encode %s: %w", key, err)
			}
		}
		if err := v.Validate(obj); err != nil {
			return nil, err
		}
	}
	gen := nextGeneration(stored, spec)
	if !defaulted && generationOf(top) == gen {
		return b, nil
	}
	if obj == nil {
		// No schema: set the generation in b's metadata alone.
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(top["metadata"], &meta); err != nil || meta == nil {
			return nil, fmt.Errorf("decode metadata of %s: not an object", key)
		}
		meta["generation"] = json.RawMessage(fmt.Sprint(gen))
		if top["metadata"], err = json.Marshal(meta); err != nil {
			return nil, fmt.Errorf("encode %s: %w", key, err)
		}
		return json.Marshal(top)
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("decode metadata of %s: not an object", key) // Validate requires it
	}
	meta["generation"] = json.Number(fmt.Sprint(gen))
	return json.Marshal(obj)
}

// nextGeneration is the generation of an object written with spec over
// stored: 1 for a new object; else the stored one, one more when spec
// changed, and at least 1.
func nextGeneration(stored []byte, spec json.RawMessage) int64 {
	if stored == nil {
		return 1
	}
	var old map[string]json.RawMessage
	if json.Unmarshal(stored, &old) != nil {
		return 1 // not an object this Client wrote: a new start
	}
	gen := generationOf(old)
	if !jsonEqual(old["spec"], spec) {
		gen++
	}
	return max(gen, 1)
}

// generationOf is metadata.generation of a decoded top level, 0 if none.
func generationOf(top map[string]json.RawMessage) int64 {
	var m struct {
		Generation int64 `json:"generation"`
	}
	_ = json.Unmarshal(top["metadata"], &m)
	return m.Generation
}

// admitStatus turns want, the encoded status about to be written into the
// object at key, into what is written: with the kind's schema known, its
// defaults filled in and every field checked (ErrInvalid). A status write
// leaves metadata.generation as it is.
func (s *Client) admitStatus(ctx context.Context, key string, want []byte) ([]byte, error) {
	v, err := s.validator(ctx, key)
	if err != nil || v == nil {
		return want, err
	}
	st, err := decodeValue(want)
	if err != nil {
		return nil, fmt.Errorf("decode status of %s: %w", key, err)
	}
	changed, err := v.AdmitStatus(key[strings.LastIndexByte(key, '/')+1:], &st)
	if err != nil {
		return nil, err
	}
	if !changed {
		return want, nil
	}
	return json.Marshal(st)
}

func decodeValue(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func decodeObject(b []byte) (map[string]any, error) {
	v, err := decodeValue(b)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}
