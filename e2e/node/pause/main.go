// Command pause holds a pod's namespaces open for containerd's CRI sandbox, as Kubernetes' own pause
// image does: it waits for SIGTERM or SIGINT and exits 0. It is the image containerd's
// sandbox_image names in e2e/node (built and imported by the project; nothing is pulled).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
