// Package kubernetes holds the example manifests of deploy/; its test
// validates them offline against the Kubernetes API types.
package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// documents splits a multi-document YAML file.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// TestManifestsDecodeStrictly: every object of auditor.yaml decodes with
// unknown or duplicate fields refused, into the real API type of its kind
// (the PodMonitor into the Prometheus Operator's), and holds what
// deploy/README.md promises: secrets by reference, a ServiceAccount,
// probes slower than /readyz's worst case, GOMEMLIMIT below the memory
// limit, a PDB that lets unhealthy pods go, a migration Job with a
// database URL (a role) of its own.
func TestManifestsDecodeStrictly(t *testing.T) {
	var (
		kinds []string
		dep   appsv1.Deployment
		pdb   policyv1.PodDisruptionBudget
		job   batchv1.Job
		sa    corev1.ServiceAccount
		pm    monitoringv1.PodMonitor
	)
	for i, doc := range documents(t, filepath.Join("auditor.yaml")) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var into any
		switch meta.APIVersion + "/" + meta.Kind {
		case "apps/v1/Deployment":
			into = &dep
		case "policy/v1/PodDisruptionBudget":
			into = &pdb
		case "batch/v1/Job":
			into = &job
		case "v1/ServiceAccount":
			into = &sa
		case "v1/ConfigMap":
			into = &corev1.ConfigMap{}
		case "monitoring.coreos.com/v1/PodMonitor":
			into = &pm
		case "v1/Secret":
			t.Fatalf("document %d: a Secret in the example; reference an existing one", i)
		default:
			t.Fatalf("document %d: unexpected %s %s", i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("document %d (%s): %v", i, meta.Kind, err)
		}
		kinds = append(kinds, meta.Kind)
	}
	for _, k := range []string{"ServiceAccount", "ConfigMap", "Job", "Deployment", "PodDisruptionBudget", "PodMonitor"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s in auditor.yaml", k)
		}
	}

	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name || job.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("the pods do not run as the ServiceAccount %q", sa.Name)
	}
	c := pod.Containers[0]
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		// /readyz's database check has a 3 s deadline.
		if p == nil || p.TimeoutSeconds <= 3 {
			t.Errorf("probe %+v: timeout must exceed /readyz's 3 s", p)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
		if e.Value != "" && (strings.Contains(strings.ToLower(e.Name), "secret") || strings.Contains(e.Name, "DATABASE_URL")) {
			t.Errorf("%s has a literal value; reference a Secret", e.Name)
		}
	}
	if e, ok := env["NOVA_AUDITOR_DATABASE_URL"]; !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Error("the database URL is not a Secret reference")
	} else {
		// The Job migrates as the schema's owner (nova_migrator), the
		// Deployment serves as nova_auditor: two Secrets
		// (deploy/README.md, "Postgres roles").
		var migrate *corev1.SecretKeySelector
		for _, je := range job.Spec.Template.Spec.Containers[0].Env {
			if je.Name == "NOVA_AUDITOR_DATABASE_URL" && je.ValueFrom != nil {
				migrate = je.ValueFrom.SecretKeyRef
			}
		}
		if migrate == nil || migrate.Name == e.ValueFrom.SecretKeyRef.Name {
			t.Errorf("the migration Job's database URL %+v is not a Secret of its own (the Deployment's is %s)", migrate, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s: static AWS keys come first in the SDK's chain, before the ServiceAccount's workload identity", k)
		}
	}
	if arn := sa.Annotations["eks.amazonaws.com/role-arn"]; !strings.HasPrefix(arn, "arn:aws:iam::") {
		t.Errorf("the ServiceAccount's IRSA role annotation is %q", arn)
	}
	// the CA certificates of sslrootcert and s3-ca-file: an optional
	// ConfigMap, mounted read-only where the comments say, in both pods
	for name, spec := range map[string]corev1.PodSpec{"Deployment": pod, "Job": job.Spec.Template.Spec} {
		ok := false
		for _, v := range spec.Volumes {
			if v.Name != "tls" || v.ConfigMap == nil || v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional {
				continue
			}
			for _, m := range spec.Containers[0].VolumeMounts {
				ok = ok || (m.Name == "tls" && m.MountPath == "/etc/nova-auditor/tls" && m.ReadOnly)
			}
		}
		if !ok {
			t.Errorf("the %s does not mount the optional CA ConfigMap read-only at /etc/nova-auditor/tls", name)
		}
	}
	limit := c.Resources.Limits.Memory().Value()
	if e, ok := env["GOMEMLIMIT"]; !ok || e.Value == "" {
		t.Error("no GOMEMLIMIT")
	} else if v := parseMiB(t, e.Value); v <= 0 || v >= limit || v < limit*8/10 {
		t.Errorf("GOMEMLIMIT %s is not 80-100%% of the memory limit %d", e.Value, limit)
	}
	if pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Error("the PDB blocks evicting not-ready pods (a node drain during a database outage)")
	}
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
		t.Errorf("PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	if args := job.Spec.Template.Spec.Containers[0].Args; len(args) == 0 || args[0] != "migrate" {
		t.Errorf("the Job runs %v, not migrate", args)
	}
	if job.Spec.Template.Spec.Containers[0].Image != c.Image {
		t.Error("the migration Job and the Deployment run different images")
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil ||
		*pm.Spec.PodMetricsEndpoints[0].Port != c.Ports[0].Name {
		t.Errorf("the PodMonitor does not scrape the container's port %q", c.Ports[0].Name)
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("the PodMonitor's selector %s=%s does not match the pods", k, v)
		}
	}
}

// parseMiB reads a GOMEMLIMIT of the form NMiB or NGiB, in bytes.
func parseMiB(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	var unit string
	for i, r := range s {
		if r < '0' || r > '9' {
			unit = s[i:]
			break
		}
		n = n*10 + int64(r-'0')
	}
	switch unit {
	case "MiB":
		return n << 20
	case "GiB":
		return n << 30
	}
	t.Fatalf("GOMEMLIMIT %q: want NMiB or NGiB", s)
	return 0
}

// TestDockerfileListensOnAllInterfaces: the image's default address is
// reachable from outside the container; the binary's stays loopback.
func TestDockerfileListensOnAllInterfaces(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("ENV NOVA_AUDITOR_HTTP_ADDR=0.0.0.0:9479")) {
		t.Fatal("the image listens on loopback only")
	}
	if _, err := os.Stat(filepath.Join("..", "..", ".dockerignore")); err != nil {
		t.Fatal("no .dockerignore")
	}
}
