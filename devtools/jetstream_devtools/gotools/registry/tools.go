//go:build tools

// Package tools pins the CNCF Distribution registry (`registry serve`), the OCI registry the
// release pushes the image and the chart to, and the test node pulls them from.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
