package objects

// Keys and names: an object's etcd key and a resource's prefix, a queue
// key's namespace and name, new uids and generated name suffixes.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/batonrun/baton/client/kinds"
)

// Key returns the etcd key of an object.
func Key(resource, namespace, name string) string {
	return kinds.RegistryPrefix + resource + "/" + namespace + "/" + name
}

// Prefix returns the key prefix of a resource's objects in a namespace.
func Prefix(resource, namespace string) string {
	return kinds.RegistryPrefix + resource + "/" + namespace + "/"
}

// SplitKey splits a queue key "namespace/name".
func SplitKey(key string) (namespace, name string, err error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("objects: key %q is not namespace/name", key)
	}
	return ns, name, nil
}

// NewUID returns a random RFC 4122 version 4 UUID.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// nameAlphabet is Kubernetes' alphabet for generated name suffixes: lowercase
// alphanumerics without vowels and look-alikes, so no words are spelled.
const nameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// RandomSuffix returns 5 random lowercase alphanumerics.
func RandomSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = nameAlphabet[int(b[i])%len(nameAlphabet)]
	}
	return string(b[:])
}
