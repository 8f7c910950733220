"""gpumeter: GPU metering and chargeback for shared Kubernetes GPU pools."""
