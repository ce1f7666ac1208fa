// The quantity check of the test suite: Kubernetes' own parser of resource quantities
// (k8s.io/apimachinery/pkg/api/resource, the code the API server runs) over quantities
// read from stdin, one per line. For each it prints one tab-separated line:
//
//	ok	<canonical form>	<exact value as a decimal>
//	err	<the parser's message>
package main

import (
	"bufio"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		q, err := resource.ParseQuantity(in.Text())
		if err != nil {
			fmt.Fprintf(out, "err\t%v\n", err)
			continue
		}
		fmt.Fprintf(out, "ok\t%s\t%s\n", q.String(), q.AsDec().String())
	}
}
