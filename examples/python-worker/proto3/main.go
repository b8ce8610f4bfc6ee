// Command proto3 writes Baton's APIs, baton.queue.v1 and baton.observer.v1,
// as one FileDescriptorSet in proto3 syntax, for code generators older than
// protobuf editions: Debian 12's `python3 -m grpc_tools.protoc` is protoc
// 3.5.1, which cannot parse proto/baton/queue/v1/queue.proto (edition 2023).
//
// The descriptors come from the generated Go code, which `make verify`
// regenerates from proto/ and compares, so the set always matches proto/.
// An editions file is translated only if its features are file-wide and each
// behaves as proto3 does, with one exception, utf8_validation = NONE (proto3
// always validates; the server checks keys itself and answers only UTF-8).
// The translation is then checked field by field: presence, packing, kind
// and enum openness must come out the same. Anything else is refused, so a
// future change to the .proto cannot be translated wrongly in silence.
//
// It is run by examples/python-worker/generate.sh, from the proto module (it
// needs only that module's dependencies):
//
//	cd proto && GOWORK=off go run ../examples/python-worker/proto3 -o baton.binpb
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// files are the files written, each after its dependencies.
var files = []protoreflect.FileDescriptor{
	durationpb.File_google_protobuf_duration_proto,
	timestamppb.File_google_protobuf_timestamp_proto,
	queuev1.File_baton_queue_v1_queue_proto,
	observerv1.File_baton_observer_v1_observer_proto,
}

func main() {
	out := flag.String("o", "", "the FileDescriptorSet to write (binary)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: proto3 -o FILE")
		os.Exit(2)
	}
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "proto3:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	set := &descriptorpb.FileDescriptorSet{}
	translated := new(protoregistry.Files)
	for _, fd := range files {
		p, err := toProto3(fd)
		if err != nil {
			return err
		}
		got, err := protodesc.NewFile(p, translated)
		if err != nil {
			return fmt.Errorf("%s: the translation does not build: %w", fd.Path(), err)
		}
		if err := sameMessages(fd.Messages(), got.Messages()); err != nil {
			return fmt.Errorf("%s: the translation differs: %w", fd.Path(), err)
		}
		if err := sameEnums(fd.Enums(), got.Enums()); err != nil {
			return fmt.Errorf("%s: the translation differs: %w", fd.Path(), err)
		}
		if err := translated.RegisterFile(got); err != nil {
			return err
		}
		set.File = append(set.File, p)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

// toProto3 returns fd as a proto3 FileDescriptorProto.
func toProto3(fd protoreflect.FileDescriptor) (*descriptorpb.FileDescriptorProto, error) {
	p := protodesc.ToFileDescriptorProto(fd)
	switch fd.Syntax() {
	case protoreflect.Proto3:
		return p, nil
	case protoreflect.Editions:
	default:
		return nil, fmt.Errorf("%s: syntax %s is not handled", fd.Path(), fd.Syntax())
	}
	if err := fileFeaturesOnly(p); err != nil {
		return nil, fmt.Errorf("%s: %w", fd.Path(), err)
	}
	if err := proto3Features(p.GetOptions().GetFeatures()); err != nil {
		return nil, fmt.Errorf("%s: %w", fd.Path(), err)
	}
	p.Syntax, p.Edition = proto.String("proto3"), nil
	if p.Options != nil {
		p.Options.Features = nil
	}
	return p, nil
}

// proto3Behaviour is, for each feature, the values that behave as proto3.
var proto3Behaviour = map[protoreflect.Name][]protoreflect.EnumNumber{
	"field_presence":          {protoreflect.EnumNumber(descriptorpb.FeatureSet_IMPLICIT)},
	"enum_type":               {protoreflect.EnumNumber(descriptorpb.FeatureSet_OPEN)},
	"repeated_field_encoding": {protoreflect.EnumNumber(descriptorpb.FeatureSet_PACKED)},
	"message_encoding":        {protoreflect.EnumNumber(descriptorpb.FeatureSet_LENGTH_PREFIXED)},
	"json_format":             {protoreflect.EnumNumber(descriptorpb.FeatureSet_ALLOW)},
	// NONE is the one difference proto3 cannot express (see the package doc).
	"utf8_validation": {
		protoreflect.EnumNumber(descriptorpb.FeatureSet_VERIFY),
		protoreflect.EnumNumber(descriptorpb.FeatureSet_NONE),
	},
}

// proto3Features refuses any feature set to a value proto3 does not have,
// and any feature it does not know. Unset features take edition 2023's
// defaults, which are proto3's.
func proto3Features(fs *descriptorpb.FeatureSet) error {
	if fs == nil {
		return nil
	}
	if len(fs.ProtoReflect().GetUnknown()) > 0 {
		return errors.New("unknown features")
	}
	var err error
	fs.ProtoReflect().Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		allowed, known := proto3Behaviour[f.Name()]
		if !known || f.Kind() != protoreflect.EnumKind {
			err = fmt.Errorf("feature %s has no proto3 equivalent here", f.FullName())
			return false
		}
		for _, a := range allowed {
			if v.Enum() == a {
				return true
			}
		}
		err = fmt.Errorf("feature %s = %v is not proto3's", f.Name(), f.Enum().Values().ByNumber(v.Enum()).Name())
		return false
	})
	return err
}

// fileFeaturesOnly refuses features set below the file: proto3 has no way
// to say them (explicit presence per field would be `optional`, which this
// translation does not do).
func fileFeaturesOnly(p *descriptorpb.FileDescriptorProto) error {
	var check func(name string, msgs []*descriptorpb.DescriptorProto) error
	enums := func(scope string, es []*descriptorpb.EnumDescriptorProto) error {
		for _, e := range es {
			if e.GetOptions().GetFeatures() != nil {
				return fmt.Errorf("enum %s%s sets features", scope, e.GetName())
			}
			for _, v := range e.GetValue() {
				if v.GetOptions().GetFeatures() != nil {
					return fmt.Errorf("enum value %s%s sets features", scope, v.GetName())
				}
			}
		}
		return nil
	}
	check = func(scope string, msgs []*descriptorpb.DescriptorProto) error {
		for _, m := range msgs {
			name := scope + m.GetName()
			if m.GetOptions().GetFeatures() != nil {
				return fmt.Errorf("message %s sets features", name)
			}
			for _, f := range append(m.GetField(), m.GetExtension()...) {
				if f.GetOptions().GetFeatures() != nil {
					return fmt.Errorf("field %s.%s sets features", name, f.GetName())
				}
			}
			for _, o := range m.GetOneofDecl() {
				if o.GetOptions().GetFeatures() != nil {
					return fmt.Errorf("oneof %s.%s sets features", name, o.GetName())
				}
			}
			if err := enums(name+".", m.GetEnumType()); err != nil {
				return err
			}
			if err := check(name+".", m.GetNestedType()); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check("", p.GetMessageType()); err != nil {
		return err
	}
	if err := enums("", p.GetEnumType()); err != nil {
		return err
	}
	for _, f := range p.GetExtension() {
		if f.GetOptions().GetFeatures() != nil {
			return fmt.Errorf("extension %s sets features", f.GetName())
		}
	}
	for _, s := range p.GetService() {
		if s.GetOptions().GetFeatures() != nil {
			return fmt.Errorf("service %s sets features", s.GetName())
		}
		for _, m := range s.GetMethod() {
			if m.GetOptions().GetFeatures() != nil {
				return fmt.Errorf("method %s.%s sets features", s.GetName(), m.GetName())
			}
		}
	}
	return nil
}

// sameMessages compares what the wire format and the generated code depend
// on, field by field, recursively.
func sameMessages(want, got protoreflect.MessageDescriptors) error {
	if want.Len() != got.Len() {
		return errors.New("a different number of messages")
	}
	for i := range want.Len() {
		w, g := want.Get(i), got.Get(i)
		if w.FullName() != g.FullName() || w.Fields().Len() != g.Fields().Len() {
			return fmt.Errorf("message %s", w.FullName())
		}
		for j := range w.Fields().Len() {
			wf, gf := w.Fields().Get(j), g.Fields().Get(j)
			if wf.Name() != gf.Name() || wf.Number() != gf.Number() || wf.Kind() != gf.Kind() ||
				wf.Cardinality() != gf.Cardinality() || wf.HasPresence() != gf.HasPresence() ||
				wf.IsPacked() != gf.IsPacked() || wf.JSONName() != gf.JSONName() ||
				(wf.ContainingOneof() == nil) != (gf.ContainingOneof() == nil) {
				return fmt.Errorf("field %s", wf.FullName())
			}
		}
		if err := sameEnums(w.Enums(), g.Enums()); err != nil {
			return err
		}
		if err := sameMessages(w.Messages(), g.Messages()); err != nil {
			return err
		}
	}
	return nil
}

func sameEnums(want, got protoreflect.EnumDescriptors) error {
	if want.Len() != got.Len() {
		return errors.New("a different number of enums")
	}
	for i := range want.Len() {
		w, g := want.Get(i), got.Get(i)
		if w.FullName() != g.FullName() || w.IsClosed() != g.IsClosed() || w.Values().Len() != g.Values().Len() {
			return fmt.Errorf("enum %s", w.FullName())
		}
	}
	return nil
}
