package controllers

// BuildsOn is buildsOn for the envtest suite (package controllers_test).
var BuildsOn = buildsOn
