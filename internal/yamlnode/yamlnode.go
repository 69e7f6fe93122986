// Package yamlnode holds the two yaml.Node facts the machine profile's sections (access:, reach:)
// both judge by hand, so that each section reads null and aliases the same way. It decides nothing
// about a profile's meaning.
package yamlnode

import "go.yaml.in/yaml/v3"

// IsNull reports whether n is absent (the zero node) or an explicit null (`~`, `null`, nothing).
func IsNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Resolve follows an alias to the node it names; any other node is returned as is.
func Resolve(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}
