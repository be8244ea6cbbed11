// Package kubernetes holds the example manifests of deploy/; its test
// validates them offline against the Kubernetes API types.
package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// manifest is one example file: every object decoded with unknown or
// duplicate fields refused, into the real API type of its kind (the
// PodMonitor into the Prometheus Operator's).
type manifest struct {
	file  string
	kinds []string
	dep   appsv1.Deployment
	sts   appsv1.StatefulSet
	svc   corev1.Service
	pdb   policyv1.PodDisruptionBudget
	job   batchv1.Job
	sa    corev1.ServiceAccount
	cm    corev1.ConfigMap
	pm    monitoringv1.PodMonitor
}

func decodeManifest(t *testing.T, file string) *manifest {
	t.Helper()
	m := &manifest{file: file}
	for i, doc := range documents(t, file) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		var into any
		switch meta.APIVersion + "/" + meta.Kind {
		case "apps/v1/Deployment":
			into = &m.dep
		case "apps/v1/StatefulSet":
			into = &m.sts
		case "v1/Service":
			into = &m.svc
		case "policy/v1/PodDisruptionBudget":
			into = &m.pdb
		case "batch/v1/Job":
			into = &m.job
		case "v1/ServiceAccount":
			into = &m.sa
		case "v1/ConfigMap":
			into = &m.cm
		case "monitoring.coreos.com/v1/PodMonitor":
			into = &m.pm
		case "v1/Secret":
			t.Fatalf("%s: document %d: a Secret in the example; reference an existing one", file, i)
		default:
			t.Fatalf("%s: document %d: unexpected %s %s", file, i, meta.APIVersion, meta.Kind)
		}
		if slices.Contains(m.kinds, meta.Kind) {
			t.Fatalf("%s: document %d: a second %s", file, i, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("%s: document %d (%s): %v", file, i, meta.Kind, err)
		}
		m.kinds = append(m.kinds, meta.Kind)
	}
	return m
}

// requireKinds checks that the file has exactly these kinds of object.
func (m *manifest) requireKinds(t *testing.T, kinds ...string) {
	t.Helper()
	if got, want := slices.Sorted(slices.Values(m.kinds)), slices.Sorted(slices.Values(kinds)); !slices.Equal(got, want) {
		t.Errorf("%s holds %v, want %v", m.file, got, want)
	}
}

// pods is the serving workload's pod template: the Deployment's or the
// StatefulSet's.
func (m *manifest) pods() corev1.PodTemplateSpec {
	if slices.Contains(m.kinds, "StatefulSet") {
		return m.sts.Spec.Template
	}
	return m.dep.Spec.Template
}

// config is the ConfigMap's config.yaml (the file serve reads).
func (m *manifest) config(t *testing.T) map[string]any {
	t.Helper()
	var c map[string]any
	if err := yaml.UnmarshalStrict([]byte(m.cm.Data["config.yaml"]), &c); err != nil || len(c) == 0 {
		t.Fatalf("%s: the ConfigMap's config.yaml: %v %v", m.file, c, err)
	}
	return c
}

// env is the serving container's environment by name.
func env(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// scrapeJobs are the job names of deploy/prometheus/scrape.yaml, which
// the alert rules read.
func scrapeJobs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "prometheus", "scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName string `json:"job_name"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, j := range cfg.ScrapeConfigs {
		jobs = append(jobs, j.JobName)
	}
	return jobs
}

// checkServe holds an example's serving pods to what deploy/README.md
// promises: secrets by reference, a ServiceAccount, probes slower than
// /readyz's worst case, GOMEMLIMIT below the memory limit, a grace period
// above --shutdown-timeout, a PDB that lets unhealthy pods go, a
// migration Job with a database URL (a role) of its own, and a PodMonitor
// that scrapes the pods as the job the alert rules read for them.
func checkServe(t *testing.T, m *manifest, scrapeJob string) {
	t.Helper()
	tmpl := m.pods()
	pod := tmpl.Spec
	if pod.ServiceAccountName != m.sa.Name || m.job.Spec.Template.Spec.ServiceAccountName != m.sa.Name {
		t.Errorf("%s: the pods do not run as the ServiceAccount %q", m.file, m.sa.Name)
	}
	c := pod.Containers[0]
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		// /readyz's database check has a 3 s deadline.
		if p == nil || p.TimeoutSeconds <= 3 {
			t.Errorf("%s: probe %+v: timeout must exceed /readyz's 3 s", m.file, p)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: the probes are not /healthz (liveness) and /readyz (readiness)", m.file)
	}
	vars := env(c)
	for _, e := range c.Env {
		if e.Value != "" && (strings.Contains(strings.ToLower(e.Name), "secret") || strings.Contains(e.Name, "DATABASE_URL")) {
			t.Errorf("%s: %s has a literal value; reference a Secret", m.file, e.Name)
		}
	}
	if e, ok := vars["NOVA_AUDITOR_DATABASE_URL"]; !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("%s: the database URL is not a Secret reference", m.file)
	} else {
		// The Job migrates as the schema's owner (nova_migrator), the
		// pods serve as nova_auditor: two Secrets (deploy/README.md,
		// "Postgres roles").
		var migrate *corev1.SecretKeySelector
		for _, je := range m.job.Spec.Template.Spec.Containers[0].Env {
			if je.Name == "NOVA_AUDITOR_DATABASE_URL" && je.ValueFrom != nil {
				migrate = je.ValueFrom.SecretKeyRef
			}
		}
		if migrate == nil || migrate.Name == e.ValueFrom.SecretKeyRef.Name {
			t.Errorf("%s: the migration Job's database URL %+v is not a Secret of its own (the pods' is %s)", m.file, migrate, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := vars[k]; ok {
			t.Errorf("%s: %s: static AWS keys come first in the SDK's chain, before the ServiceAccount's workload identity", m.file, k)
		}
	}
	if arn := m.sa.Annotations["eks.amazonaws.com/role-arn"]; !strings.HasPrefix(arn, "arn:aws:iam::") {
		t.Errorf("%s: the ServiceAccount's IRSA role annotation is %q", m.file, arn)
	}
	// the CA certificates of sslrootcert and s3-ca-file: an optional
	// ConfigMap, mounted read-only where the comments say, in both pods
	for name, spec := range map[string]corev1.PodSpec{"serving pods": pod, "Job": m.job.Spec.Template.Spec} {
		ok := false
		for _, v := range spec.Volumes {
			if v.Name != "tls" || v.ConfigMap == nil || v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional {
				continue
			}
			for _, vm := range spec.Containers[0].VolumeMounts {
				ok = ok || (vm.Name == "tls" && vm.MountPath == "/etc/nova-auditor/tls" && vm.ReadOnly)
			}
		}
		if !ok {
			t.Errorf("%s: the %s do not mount the optional CA ConfigMap read-only at /etc/nova-auditor/tls", m.file, name)
		}
	}
	limit := c.Resources.Limits.Memory().Value()
	if e, ok := vars["GOMEMLIMIT"]; !ok || e.Value == "" {
		t.Errorf("%s: no GOMEMLIMIT", m.file)
	} else if v := parseMiB(t, e.Value); v <= 0 || v >= limit || v < limit*8/10 {
		t.Errorf("%s: GOMEMLIMIT %s is not 80-100%% of the memory limit %d", m.file, e.Value, limit)
	}
	// SIGTERM lets a running cycle finish within --shutdown-timeout, then
	// releases (or hands off) the leases: the kubelet must wait longer.
	st, _ := m.config(t)["shutdown-timeout"].(string)
	shutdown, err := time.ParseDuration(st)
	if err != nil {
		t.Errorf("%s: the config's shutdown-timeout %q: %v", m.file, st, err)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= shutdown {
		t.Errorf("%s: terminationGracePeriodSeconds (%s) is not above shutdown-timeout %s", m.file, ptr(g), shutdown)
	}
	if m.pdb.Spec.UnhealthyPodEvictionPolicy == nil || *m.pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("%s: the PDB blocks evicting not-ready pods (a node drain during a database outage)", m.file)
	}
	if m.pdb.Spec.MaxUnavailable == nil || *m.pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
		t.Errorf("%s: PDB maxUnavailable %v, want 1", m.file, m.pdb.Spec.MaxUnavailable)
	}
	if !selects(m.pdb.Spec.Selector.MatchLabels, tmpl.Labels) {
		t.Errorf("%s: the PDB's selector %v does not match the pods %v", m.file, m.pdb.Spec.Selector.MatchLabels, tmpl.Labels)
	}
	if args := m.job.Spec.Template.Spec.Containers[0].Args; len(args) == 0 || args[0] != "migrate" {
		t.Errorf("%s: the Job runs %v, not migrate", m.file, args)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("%s: the pods run %v, not serve", m.file, c.Args)
	}
	if m.job.Spec.Template.Spec.Containers[0].Image != c.Image {
		t.Errorf("%s: the migration Job and the pods run different images", m.file)
	}

	// The PodMonitor: the pods' port, as the job the rules read.
	if len(m.pm.Spec.PodMetricsEndpoints) != 1 || m.pm.Spec.PodMetricsEndpoints[0].Port == nil ||
		*m.pm.Spec.PodMetricsEndpoints[0].Port != c.Ports[0].Name {
		t.Fatalf("%s: the PodMonitor does not scrape the container's port %q", m.file, c.Ports[0].Name)
	}
	if !selects(m.pm.Spec.Selector.MatchLabels, tmpl.Labels) {
		t.Errorf("%s: the PodMonitor's selector %v does not match the pods", m.file, m.pm.Spec.Selector.MatchLabels)
	}
	if !slices.Contains(scrapeJobs(t), scrapeJob) {
		t.Fatalf("deploy/prometheus/scrape.yaml has no job %s", scrapeJob)
	}
	if l := m.pm.Spec.JobLabel; l == "" || tmpl.Labels[l] != scrapeJob {
		t.Errorf("%s: the PodMonitor's job is the pods' label %q (%q), want %s", m.file, l, tmpl.Labels[l], scrapeJob)
	}
	if !m.pm.Spec.PodMetricsEndpoints[0].HonorLabels {
		t.Errorf("%s: the PodMonitor does not keep the auditor's labels (honorLabels)", m.file)
	}
}

// ptr prints an optional number.
func ptr[N int32 | int64](n *N) string {
	if n == nil {
		return "unset"
	}
	return strconv.FormatInt(int64(*n), 10)
}

// selects reports whether a matchLabels selector matches the labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// TestManifestsDecodeStrictly: the example of one star (auditor.yaml)
// decodes strictly and holds what deploy/README.md promises (checkServe);
// its PodMonitor puts the pod's star on every target, which
// NovaAuditorStarDown needs.
func TestManifestsDecodeStrictly(t *testing.T) {
	m := decodeManifest(t, "auditor.yaml")
	m.requireKinds(t, "ServiceAccount", "ConfigMap", "Job", "Deployment", "PodDisruptionBudget", "PodMonitor")
	checkServe(t, m, "nova-auditor")
	star := m.pods().Labels["nova.io/star"]
	if e := env(m.pods().Spec.Containers[0])["NOVA_AUDITOR_STAR"]; star == "" || e.Value != star {
		t.Errorf("the pods serve star %q and are labelled nova.io/star=%q", e.Value, star)
	}
	ok := false
	for _, r := range m.pm.Spec.PodMetricsEndpoints[0].RelabelConfigs {
		ok = ok || (r.TargetLabel == "star" && slices.Equal(r.SourceLabels, []monitoringv1.LabelName{"__meta_kubernetes_pod_label_nova_io_star"}))
	}
	if !ok {
		t.Error("the PodMonitor does not set star on the targets from the pod label nova.io/star")
	}
}

// TestFleetManifest: the fleet's example (auditor-fleet.yaml) decodes
// strictly and holds what deploy/README.md promises of serving pods
// (checkServe) and of a fleet: a StatefulSet of 3 whose stable pod names
// are the members' identities (--holder), serving every star, with its
// headless Service; scraped as the job nova-auditor-fleet and not by the
// single-star example's PodMonitor.
func TestFleetManifest(t *testing.T) {
	m := decodeManifest(t, "auditor-fleet.yaml")
	m.requireKinds(t, "ServiceAccount", "ConfigMap", "Job", "Service", "StatefulSet", "PodDisruptionBudget", "PodMonitor")
	checkServe(t, m, "nova-auditor-fleet")
	sts := m.sts.Spec
	if sts.Replicas == nil || *sts.Replicas != 3 {
		t.Errorf("replicas %s, want 3", ptr(sts.Replicas))
	}
	if sts.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: members do not wait for one another", sts.PodManagementPolicy)
	}
	if sts.ServiceName != m.svc.Name || m.svc.Spec.ClusterIP != corev1.ClusterIPNone || !selects(m.svc.Spec.Selector, sts.Template.Labels) {
		t.Errorf("the StatefulSet's service %q is not the headless Service %q of its pods", sts.ServiceName, m.svc.Name)
	}
	if !selects(sts.Selector.MatchLabels, sts.Template.Labels) {
		t.Errorf("the StatefulSet's selector does not match its pods")
	}
	c := sts.Template.Spec.Containers[0]
	vars := env(c)
	if h := vars["NOVA_AUDITOR_HOLDER"]; h.ValueFrom == nil || h.ValueFrom.FieldRef == nil || h.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("the member's identity (NOVA_AUDITOR_HOLDER) is not the pod's name")
	}
	if i := slices.Index(c.Args, "--stars"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "all" {
		t.Errorf("the members run %v, not serve --stars all", c.Args)
	}
	if _, ok := vars["NOVA_AUDITOR_STAR"]; ok {
		t.Error("a fleet member is given one star")
	}
	if _, ok := m.config(t)["star"]; ok {
		t.Error("the fleet's config names one star")
	}
	if _, ok := sts.Template.Labels["nova.io/star"]; ok {
		t.Error("the fleet's pods are labelled with a star")
	}
	single := decodeManifest(t, "auditor.yaml")
	if selects(single.pm.Spec.Selector.MatchLabels, sts.Template.Labels) {
		t.Error("the single-star example's PodMonitor scrapes the fleet's pods as the job nova-auditor")
	}
	if selects(m.pm.Spec.Selector.MatchLabels, single.pods().Labels) {
		t.Error("the fleet's PodMonitor scrapes the single-star pods")
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
