package deploy

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartRestore renders the chart's restore mode (restore.fromSnapshot)
// from a PersistentVolumeClaim (the example) and from a Secret with
// cert-manager (so that the restore is the voters' only init container),
// and the default values. With it, every voter runs the init container
// "restore" before the store: `store snapshot restore <file>
// --data-dir=<the store's --data-dir> --skip-if-present`, with the store's
// data volume mounted where the store has it and the given volume, read
// only, holding the file; non-voters (which join and get the state from
// the leader) and the default values have no such container. TestChart
// lints the example and checks the container's flags against the store
// binary; TestChartRejectsBadValues the schema's messages.
func TestChartRestore(t *testing.T) {
	for _, c := range []struct {
		name, file string
		args       []string
		source     func(corev1.VolumeSource) bool
	}{
		{"pvc", "meridian.snap", []string{"-f", filepath.Join(chartDir, "examples", "restore-from-snapshot.yaml")},
			func(v corev1.VolumeSource) bool {
				return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "meridian-backups" && v.PersistentVolumeClaim.ReadOnly
			}},
		{"secret-cert-manager", "backups/2026-11-28.snap", []string{"--set", "certManager.enabled=true,restore.fromSnapshot.enabled=true," +
			"restore.fromSnapshot.volume.secret.secretName=meridian-snapshot,restore.fromSnapshot.file=backups/2026-11-28.snap"},
			func(v corev1.VolumeSource) bool { return v.Secret != nil && v.Secret.SecretName == "meridian-snapshot" }},
		{"default", "", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := render(t, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			voters, nonVoters := 0, 0
			for _, o := range decodeAll(t, out) {
				ss, ok := o.typed.(*appsv1.StatefulSet)
				if !ok || ss.Spec.Template.Labels["app.kubernetes.io/component"] != "store" {
					continue
				}
				spec := ss.Spec.Template.Spec
				i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "restore" })
				voter := ss.Spec.Template.Labels["meridian.io/store-role"] == "voter"
				if voter {
					voters++
				} else {
					nonVoters++
				}
				if c.source == nil || !voter {
					if i >= 0 {
						t.Errorf("StatefulSet %s (voter %v) has a restore init container with restore %v", ss.Name, voter, c.args)
					}
					continue
				}
				if i < 0 {
					t.Errorf("voters' StatefulSet %s has no restore init container (init containers %v)", ss.Name, spec.InitContainers)
					continue
				}
				checkRestoreContainer(t, ss.Name, spec, spec.InitContainers[i], c.file, c.source)
			}
			if voters != 1 || (c.name == "pvc") != (nonVoters == 1) {
				t.Errorf("%d voters' and %d non-voters' StatefulSets rendered", voters, nonVoters)
			}
		})
	}
}

// checkRestoreContainer checks a voter's restore init container against
// the pod's store container: same image, the store's data directory and
// its volume, the backup file on the read-only volume "restore" of the
// given source.
func checkRestoreContainer(t *testing.T, set string, spec corev1.PodSpec, rc corev1.Container, file string, source func(corev1.VolumeSource) bool) {
	t.Helper()
	si := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "store" })
	if si < 0 {
		t.Fatalf("%s: no store container", set)
	}
	store := spec.Containers[si]
	if rc.Image != store.Image {
		t.Errorf("%s: restore runs %s, the store %s", set, rc.Image, store.Image)
	}
	dataDir := ""
	for _, a := range store.Args {
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			dataDir = v
		}
	}
	mountOf := func(c corev1.Container, name string) *corev1.VolumeMount {
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == name {
				return &c.VolumeMounts[i]
			}
		}
		return nil
	}
	data, rdata := mountOf(store, "data"), mountOf(rc, "data")
	if data == nil || rdata == nil || data.MountPath != rdata.MountPath || !strings.HasPrefix(dataDir+"/", data.MountPath+"/") {
		t.Errorf("%s: the store's --data-dir=%s on mount %+v, restore's data mount %+v", set, dataDir, data, rdata)
	}
	backup := mountOf(rc, "restore")
	if backup == nil || !backup.ReadOnly {
		t.Fatalf("%s: restore's backup mount %+v, want the volume restore read-only", set, backup)
	}
	want := []string{"snapshot", "restore", backup.MountPath + "/" + file, "--data-dir=" + dataDir, "--skip-if-present"}
	if !slices.Equal(rc.Args, want) {
		t.Errorf("%s: restore args %q, want %q", set, rc.Args, want)
	}
	vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "restore" })
	if vi < 0 || !source(spec.Volumes[vi].VolumeSource) {
		t.Errorf("%s: the volume restore is not the one given in restore.fromSnapshot.volume: %+v", set, spec.Volumes)
	}
}
