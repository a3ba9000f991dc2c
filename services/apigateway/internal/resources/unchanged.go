package resources

import (
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// # Updates that change nothing
//
// An update, patch or apply whose result encodes for storage to exactly
// the bytes stored writes nothing: no store write, no new
// resourceVersion, no watch event. The response is the stored object with
// its resourceVersion, 200 OK. This is kube-apiserver's rule: its storage
// compares the encoded new object with the stored one and skips the write
// when they are equal (GuaranteedUpdate in k8s.io/apiserver's etcd3
// store). Controllers replace objects with what they read all the time;
// each needless write would reach every watcher.
//
// The exception, also upstream's: an object whose stored value was
// decrypted with a key other than the one new writes use (a rotated
// encryption key, storage.KV.Stale) is written again even unchanged, so
// that replacing every object with itself (kubectl get -o json | kubectl
// replace -f -) re-encrypts them.
//
// managedFields decide whether such an update is unchanged, as upstream:
//
//   - An Update entry's time moves only when its manager changed a field
//     (managedfields' managedFieldsUpdater), so replacing an object with
//     what is stored, by any manager, changes no entry.
//   - A re-apply that changes nothing (the same configuration by the same
//     manager) keeps the Apply entry and its time.
//   - A client that sends the stored managedFields in another order gets
//     them back sorted, as stored.
//   - Should an entry's time be the only change left, it is reverted
//     (keepManagedFieldsTimes), so a timestamp alone never causes a write.
//
// A resourceVersion in the body is a precondition (409 when stale), as for
// any update; it is not part of what is compared.

// keepManagedFieldsTimes restores old's managedFields timestamps in obj
// when they are the only difference between the two: same entries (times
// aside), everything else semantically equal. It is kube-apiserver's
// IgnoreManagedFieldsTimestampsTransformer, run where it runs: after the
// strategy and validation, before validating admission. obj and old must
// have the same resourceVersion.
func keepManagedFieldsTimes(obj, old runtime.Object) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	oldAcc, err := meta.Accessor(old)
	if err != nil {
		return
	}
	mf, oldMF := acc.GetManagedFields(), oldAcc.GetManagedFields()
	if len(mf) == 0 || len(mf) != len(oldMF) {
		// An entry added or removed is a change a manager must see.
		return
	}
	timesChanged := false
	for i := range mf {
		if !mf[i].Time.Equal(oldMF[i].Time) {
			timesChanged = true
			break
		}
	}
	if !timesChanged {
		return
	}
	kept := make([]metav1.ManagedFieldsEntry, len(mf))
	for i := range mf {
		kept[i] = mf[i]
		kept[i].Time = oldMF[i].Time
	}
	if !apiequality.Semantic.DeepEqual(kept, oldMF) {
		return
	}
	acc.SetManagedFields(kept)
	if !apiequality.Semantic.DeepEqual(obj, old) {
		acc.SetManagedFields(mf)
	}
}
