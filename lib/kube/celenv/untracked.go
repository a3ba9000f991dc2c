package celenv

import (
	"fmt"
	"math"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
)

// UntrackedEnvs is the twin of Base without runtime cost tracking: the
// same libraries, declarations, language settings and estimator options,
// introduced and removed at the same versions as in
// k8s.io/apiserver/pkg/cel/environment's base environment (base.go,
// v0.37), but with only cel.OptOptimize among the program options.
// Base's programs also carry cel.OptTrackCost, cel.CostLimit,
// cel.CostTrackerOptions and cel.CostTracking, which attach cel-go's
// per-node cost observer to every evaluation; an env.Program of Base
// cannot drop them.
//
// A program of these environments has no runtime cost limit: it is for
// expressions whose estimated cost, under known input sizes, has been
// shown to fit the limits the tracked program would enforce (see
// services/admission/internal/celpolicy). TestUntrackedTwin proves that
// the twin and Base accept, reject and evaluate the same expressions.
type UntrackedEnvs struct {
	newExpressions, storedExpressions *cel.Env
}

// NewExpressionsEnv is the twin of Base().NewExpressionsEnv().
func (u *UntrackedEnvs) NewExpressionsEnv() *cel.Env { return u.newExpressions }

// StoredExpressionsEnv is the twin of Base().StoredExpressionsEnv().
func (u *UntrackedEnvs) StoredExpressionsEnv() *cel.Env { return u.storedExpressions }

// untrackedEnvs builds the twin once per process, as the library builds
// Base once per process; it is immutable once built.
var untrackedEnvs = sync.OnceValues(func() (*UntrackedEnvs, error) {
	return newUntrackedEnvs(environment.DefaultCompatibilityVersion())
})

// Untracked returns the twin of Base without runtime cost tracking.
func Untracked() (*UntrackedEnvs, error) { return untrackedEnvs() }

// versioned is one entry of the base environment's option list.
type versioned struct {
	introduced, removed *version.Version // removed nil: never removed
	opts                []cel.EnvOption
	progOpts            []cel.ProgramOption
}

// untrackedOptions are base.go's baseOpts, entry for entry, with the
// cost-tracking program options left out (and StrictCostOpt, which holds
// only a cost-tracking program option, dropped).
func untrackedOptions() []versioned {
	v := version.MajorMinor
	return []versioned{
		{introduced: v(1, 0), opts: []cel.EnvOption{
			cel.HomogeneousAggregateLiterals(),
			cel.EagerlyValidateDeclarations(true),
			cel.DefaultUTCTimeZone(true),
			environment.UnversionedLib(library.URLs),
			environment.UnversionedLib(library.Regex),
			cel.CostEstimatorOptions(checker.PresenceTestHasCost(false)),
		}, progOpts: []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}},
		{introduced: v(1, 0), removed: v(1, 37), opts: []cel.EnvOption{library.Lists(library.ListsVersion(0))}},
		{introduced: v(1, 27), opts: []cel.EnvOption{environment.UnversionedLib(library.Authz)}},
		{introduced: v(1, 28), opts: []cel.EnvOption{
			cel.CrossTypeNumericComparisons(true),
			cel.OptionalTypes(),
			environment.UnversionedLib(library.Quantity),
		}},
		{introduced: v(1, 29), opts: []cel.EnvOption{cel.ASTValidators(
			cel.ValidateDurationLiterals(),
			cel.ValidateTimestampLiterals(),
			cel.ValidateRegexLiterals(),
			cel.ValidateHomogeneousAggregateLiterals(),
		)}},
		{introduced: v(1, 0), removed: v(1, 29), opts: []cel.EnvOption{ext.Strings(ext.StringsVersion(0))}},
		{introduced: v(1, 29), opts: []cel.EnvOption{ext.Strings(ext.StringsVersion(2))}},
		{introduced: v(1, 29), opts: []cel.EnvOption{ext.Sets()}},
		{introduced: v(1, 30), opts: []cel.EnvOption{environment.UnversionedLib(library.IP), environment.UnversionedLib(library.CIDR)}},
		{introduced: v(1, 31), opts: []cel.EnvOption{environment.UnversionedLib(library.Format)}},
		{introduced: v(1, 31), opts: []cel.EnvOption{environment.UnversionedLib(library.AuthzSelectors)}},
		{introduced: v(1, 32), opts: []cel.EnvOption{ext.TwoVarComprehensions()}},
		{introduced: v(1, 33), opts: []cel.EnvOption{library.SemverLib(library.SemverVersion(1))}},
		{introduced: v(1, 34), opts: []cel.EnvOption{ext.Lists(ext.ListsVersion(3))}},
		{introduced: v(1, 37), opts: []cel.EnvOption{library.Lists(library.ListsVersion(1))}},
	}
}

// newUntrackedEnvs builds the twin at compatibility version compat: the
// new-expressions environment holds the options present at compat, the
// stored one every option not removed, as EnvSet.Extend selects them.
func newUntrackedEnvs(compat *version.Version) (*UntrackedEnvs, error) {
	build := func(at *version.Version) (*cel.Env, error) {
		var envOpts []cel.EnvOption
		var progOpts []cel.ProgramOption
		for _, o := range untrackedOptions() {
			if at.AtLeast(o.introduced) && (o.removed == nil || at.LessThan(o.removed)) {
				envOpts = append(envOpts, o.opts...)
				progOpts = append(progOpts, o.progOpts...)
			}
		}
		base, err := cel.NewEnv()
		if err != nil {
			return nil, err
		}
		return base.Extend(cel.Lib(&loader{envOpts: envOpts, progOpts: progOpts}))
	}
	n, err := build(compat)
	if err != nil {
		return nil, fmt.Errorf("untracked new-expressions environment: %w", err)
	}
	s, err := build(version.MajorMinor(math.MaxUint, math.MaxUint))
	if err != nil {
		return nil, fmt.Errorf("untracked stored-expressions environment: %w", err)
	}
	return &UntrackedEnvs{newExpressions: n, storedExpressions: s}, nil
}

// loader is a cel.Library of a list of options, as EnvSet.Extend wraps
// the options it selects.
type loader struct {
	envOpts  []cel.EnvOption
	progOpts []cel.ProgramOption
}

func (l *loader) CompileOptions() []cel.EnvOption     { return l.envOpts }
func (l *loader) ProgramOptions() []cel.ProgramOption { return l.progOpts }
