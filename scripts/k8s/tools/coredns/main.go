// CoreDNS for the test node, with only the plugins its Corefile uses (scripts/k8s/node/coredns.yaml).
//
// CoreDNS selects plugins at compile time: a main package imports coremain and the plugins it
// wants and sets dnsserver.Directives, the plugins in the order plugin.cfg gives them (that order
// is the order a query passes through them). scripts/k8s/build-tools.sh builds this package in
// the same wrapper module and the same `go build` as the Kubernetes commands, so client-go and
// the rest are compiled once; the default build (every plugin, with the cloud SDKs of route53,
// azure, clouddns...) costs several times more.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The Corefile's plugins, in plugin.cfg's order.
var directives = []string{
	"ready",
	"health",
	"errors",
	"log",
	"cache",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
