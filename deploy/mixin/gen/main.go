// Command gen writes the auditor's alert rules from the mixin's template
// and a _config: `make mixin` (the default configuration, into
// deploy/prometheus/alerts.yaml), or
//
//	go run ./deploy/mixin/gen -config my-config.yaml -out my-alerts.yaml
//
// with a file of {"_config": {...}} (YAML or JSON) naming only what
// differs from the defaults (deploy/mixin/config.go).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nova/auditor/deploy/mixin"
)

func main() {
	config := flag.String("config", "", "a _config file (YAML or JSON); empty: the defaults")
	out := flag.String("out", "-", "where to write the rules; - for standard output")
	flag.Parse()
	if err := run(*config, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mixin:", err)
		os.Exit(1)
	}
}

func run(config, out string) error {
	cfg := mixin.Default()
	if config != "" {
		var err error
		if cfg, err = mixin.LoadConfig(config); err != nil {
			return err
		}
	}
	b, err := mixin.Rules(cfg)
	if err != nil {
		return err
	}
	if out == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
