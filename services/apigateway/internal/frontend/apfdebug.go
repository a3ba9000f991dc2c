package frontend

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// apfDebugPrefix is where kube-apiserver serves API Priority and
// Fairness's state.
const apfDebugPrefix = "/debug/api_priority_and_fairness/"

// apfDumps are the debug endpoints, by path, each a table of the
// flow-control service's state in kube-apiserver's format: comma and
// tab separated columns under a header row.
var apfDumps = map[string]func(w io.Writer, d *flowcontrolv1.DumpResponse, details bool){
	apfDebugPrefix + "dump_priority_levels": dumpPriorityLevels,
	apfDebugPrefix + "dump_queues":          dumpQueues,
	apfDebugPrefix + "dump_requests":        dumpRequests,
}

// serveAPFDebug serves a GET of one of apfDumps; it reports false for any
// other request.
func (h *Handler) serveAPFDebug(w http.ResponseWriter, r *http.Request) bool {
	dump, ok := apfDumps[r.URL.Path]
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	d, err := h.cfg.FlowControl.Dump(r.Context())
	if err != nil {
		writeStatus(w, apierrors.NewServiceUnavailable(err.Error()).ErrStatus)
		return true
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	tw := tabwriter.NewWriter(w, 8, 0, 1, ' ', 0)
	dump(tw, d, r.URL.Query().Get("includeRequestDetails") == "1")
	_ = tw.Flush()
	return true
}

func row(w io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(w, strings.Join(s, ",\t"))
}

func dumpPriorityLevels(w io.Writer, d *flowcontrolv1.DumpResponse, _ bool) {
	row(w, "PriorityLevelName", "ActiveQueues", "IsIdle", "IsQuiescing", "WaitingRequests", "ExecutingRequests",
		"DispatchedRequests", "RejectedRequests", "TimedoutRequests", "CancelledRequests")
	for _, l := range d.GetPriorityLevels() {
		idle := l.GetWaiting() == 0 && l.GetExecuting() == 0
		row(w, l.GetName(), l.GetActiveQueues(), idle, false, l.GetWaiting(), l.GetExecuting(),
			l.GetDispatched(), l.GetRejected(), l.GetTimedOut(), l.GetCancelled())
	}
}

func dumpQueues(w io.Writer, d *flowcontrolv1.DumpResponse, _ bool) {
	row(w, "PriorityLevelName", "Index", "PendingRequests", "ExecutingRequests", "SeatsInUse", "NextDispatchR",
		"InitialSeatsSum", "MaxSeatsSum", "TotalWorkSum")
	for _, l := range d.GetPriorityLevels() {
		for i, q := range l.GetQueues() {
			// One stage per request here: its seats are its initial and
			// its largest; its work is seats × the level's execution
			// estimate, as the service charges it.
			row(w, l.GetName(), i, q.GetWaiting(), q.GetExecuting(), q.GetSeatsInUse(),
				fmt.Sprintf("%.8fss", q.GetNextDispatchR()), q.GetSeatsWaiting(), q.GetSeatsWaiting(),
				fmt.Sprintf("%.8fss", q.GetWorkWaiting()))
		}
	}
}

func dumpRequests(w io.Writer, d *flowcontrolv1.DumpResponse, details bool) {
	headers := []any{"PriorityLevelName", "FlowSchemaName", "QueueIndex", "RequestIndexInQueue", "FlowDistingsher",
		"ArriveTime", "InitialSeats", "FinalSeats", "AdditionalLatency", "StartTime"}
	if details {
		headers = append(headers, "UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion", "Resource", "SubResource")
	}
	row(w, headers...)
	for _, l := range d.GetPriorityLevels() {
		for _, r := range l.GetRequests() {
			start := "<none>"
			if r.GetStartTime() != nil {
				start = r.GetStartTime().AsTime().UTC().Format(time.RFC3339Nano)
			}
			cells := []any{l.GetName(), r.GetFlowSchema(), r.GetQueueIndex(), r.GetIndexInQueue(), r.GetFlowDistinguisher(),
				r.GetArriveTime().AsTime().UTC().Format(time.RFC3339Nano), r.GetSeats(), 0, "0s", start}
			if details {
				// The digest carries the path of non-resource requests and
				// the group (not the version) of resource requests.
				cells = append(cells, r.GetUser(), r.GetVerb(), r.GetPath(), r.GetNamespace(), r.GetName(),
					r.GetApiGroup(), r.GetResource(), r.GetSubresource())
			}
			row(w, cells...)
		}
	}
}
