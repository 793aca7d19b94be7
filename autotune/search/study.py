"""The Optuna study of one workload's search: every trial it runs, kept in autotune's database.

The study lives in Optuna's RDB storage in autotune's own database, named
``<run id>:<workload>`` (:func:`study_name`), so a restarted run resumes it and
optuna-dashboard can open it. Every config the search runs inside the policy's space is a
study trial: sampler strategies ask the study's sampler (:meth:`TrialStudy.ask`), the others
ask for their own pick (:meth:`TrialStudy.ask_for`); a config measured outside the study (the
baseline) is added as a finished trial (:meth:`TrialStudy.record`) when it lies in the space.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.errors import SearchError
from autotune.objective import Outcome
from autotune.types import KNOB_NAMES, TrialConfig

if TYPE_CHECKING:
    import optuna

__all__ = ["TrialStudy", "study_name"]


def study_name(run_id: str, workload: str) -> str:
    return f"{run_id}:{workload}"


class TrialStudy:
    """Ask/tell access to one Optuna study over a space of configs (see the module doc)."""

    def __init__(self, storage_url: str, name: str, choices: Mapping[str, Sequence[Any]]) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name = name
        self._choices = {k: list(choices[k]) for k in KNOB_NAMES}
        self._asked: dict[int, optuna.Trial] = {}
        engine_kwargs: dict[str, Any] = {}
        if storage_url.startswith("sqlite"):
            engine_kwargs = {"connect_args": {"timeout": 30}}
        try:
            storage = optuna.storages.RDBStorage(storage_url, engine_kwargs=engine_kwargs)
            self._study = optuna.create_study(
                study_name=name, storage=storage, direction="maximize", load_if_exists=True,
                sampler=optuna.samplers.RandomSampler())
        except Exception as e:  # optuna wraps driver errors in its own types
            raise SearchError(f"cannot open the Optuna study {name!r} in {storage_url}: "
                              f"{e}") from e
        # Trials a killed process left RUNNING (asked) or WAITING (enqueued by ask_for, not
        # yet asked) are failed: their configs are asked again, and a stale WAITING trial
        # would otherwise be handed out in place of the next config asked for.
        state = optuna.trial.TrialState
        study_id = storage.get_study_id_from_name(name)
        for ft in self._study.get_trials(deepcopy=False, states=(state.RUNNING, state.WAITING)):
            storage.set_trial_state_values(
                storage.get_trial_id_from_study_id_trial_number(study_id, ft.number),
                state=state.FAIL)

    def use_sampler(self, sampler: optuna.samplers.BaseSampler) -> None:
        """Let ``sampler`` pick the configs :meth:`ask` returns."""
        self._study.sampler = sampler

    def ask(self) -> tuple[int, TrialConfig]:
        """The sampler's next config, as a new running trial (its number, the config)."""
        trial = self._study.ask()
        self._asked[trial.number] = trial
        return trial.number, self._config(trial)

    def ask_for(self, config: TrialConfig) -> int:
        """Start a trial of exactly ``config`` (enqueued, then asked); its number."""
        self._study.enqueue_trial({k: getattr(config, k) for k in KNOB_NAMES})
        number, asked = self.ask()
        if asked != config:
            raise SearchError(f"the study {self.name!r} handed out {asked} when asked for "
                              f"{config}")
        return number

    def tell(self, number: int, outcome: Outcome | None) -> None:
        """Finish trial ``number`` with ``outcome`` (None or a non-finite value: failed)."""
        import optuna

        trial = self._asked.pop(number)
        if outcome is None or not math.isfinite(outcome.value):
            self._study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        for name, value in outcome.constraints.items():
            trial.set_constraint(name, value)
        self._study.tell(trial, outcome.value)

    def prune(self, number: int) -> None:
        """Drop trial ``number`` without a result (a duplicate draw)."""
        import optuna

        self._study.tell(self._asked.pop(number), state=optuna.trial.TrialState.PRUNED)

    def record(self, config: TrialConfig, outcome: Outcome | None) -> None:
        """Add ``config``, measured outside the study, as a finished trial."""
        import optuna

        dists: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.CategoricalDistribution(self._choices[k])
            for k in KNOB_NAMES}
        params = {k: getattr(config, k) for k in KNOB_NAMES}
        if outcome is None or not math.isfinite(outcome.value):
            self._study.add_trial(optuna.trial.create_trial(
                params=params, distributions=dists, state=optuna.trial.TrialState.FAIL))
            return
        self._study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, value=outcome.value,
            system_attrs={f"constraints:{k}": v for k, v in outcome.constraints.items()}))

    def _config(self, trial: optuna.Trial) -> TrialConfig:
        params = {k: trial.suggest_categorical(k, self._choices[k]) for k in KNOB_NAMES}
        if params["num_speculative_tokens"] == 0:
            params["enable_adaptive_verification"] = False
        return TrialConfig.from_dict(params)
