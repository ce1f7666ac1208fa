// kstatus prints the kstatus verdict (Current, InProgress, Failed, …) that Flux computes for
// each object it reads: a JSON object or a JSON list (`kubectl get -o json`) on stdin, one
// line per object: `<kind>/<name> <status> <message>`.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	// Numbers as int64 where they are integers, as unstructured objects expect.
	"k8s.io/apimachinery/pkg/util/json"
)

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(input, &obj); err != nil {
		fail(err)
	}
	items := []any{obj}
	if list, ok := obj["items"].([]any); ok {
		items = list
	}
	for _, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		res, err := status.Compute(u)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s/%s %s %s\n", u.GetKind(), u.GetName(), res.Status, res.Message)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kstatus:", err)
	os.Exit(2)
}
