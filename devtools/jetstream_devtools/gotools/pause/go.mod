// The pod sandbox ("pause") process of the local node, built here since no image can be pulled.
module jetstream-operator.io/devtools/pause

go 1.24.0
