// Prints what kstatus (sigs.k8s.io/cli-utils, the library Flux and cli-utils' wait use) reads
// from each object given on stdin as one JSON array: one JSON line per object.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	// Kubernetes' own JSON decoding: whole numbers as int64, as unstructured objects expect.
	var objects []map[string]interface{}
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = utiljson.Unmarshal(data, &objects)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus: stdin is not a JSON array of objects:", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for _, object := range objects {
		result, err := status.Compute(&unstructured.Unstructured{Object: object})
		if err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		_ = out.Encode(map[string]string{"status": string(result.Status), "message": result.Message})
	}
}
