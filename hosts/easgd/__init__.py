"""The EASGD family (You, Buluc, Demmel, SC17) and the SGD counterparts it is
compared with: update rules (rules.py), the master holding the centre variable
(master.py), the workers (worker.py). See docs/easgd.md."""
