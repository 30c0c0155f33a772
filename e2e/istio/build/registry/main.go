// A throwaway OCI registry for the Istio e2e tests: go-containerregistry's in-memory registry
// (the reference implementation crane and ko test against), bound to one loopback address so the
// test can push the filter image with oras and let pilot-agent pull it as oci://.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5000", "address to serve on (loopback only)")
	flag.Parse()
	server := &http.Server{
		Addr:              *listen,
		Handler:           registry.New(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Printf("registry listening on %s", *listen)
	log.Fatal(server.ListenAndServe())
}
