"""Training stages of pettingllms: the oracle-demonstration warm start (:mod:`pettingllms.trainer.sft`,
:mod:`pettingllms.trainer.demonstrations`) and the AT-GRPO trainer."""
