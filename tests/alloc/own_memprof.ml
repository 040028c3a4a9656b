(* tests/alloc/own_memprof.ml — a program that runs its own Gc.Memprof
   profile, then asks flamme for allocation profiles too. Flamme.start
   ~alloc must refuse (Flamme.Error, the program's profile left running),
   whatever the release: OCaml 5.3 and 5.4's Memprof.start raises, 5.5's
   would replace the program's profile without a word.
   Usage: own_memprof.exe OUT.flm. Prints "refused: MSG" or "accepted",
   then "own samples after: N" (the program's own callbacks after that). *)

let own = Atomic.make 0

let tracker =
  {
    Gc.Memprof.null_tracker with
    alloc_minor =
      (fun _ ->
        Atomic.incr own;
        None);
  }

let churn n =
  let keep = ref [] in
  for i = 1 to n do
    keep := (i, i + 1) :: !keep;
    if i mod 1000 = 0 then keep := []
  done;
  List.length !keep

let () =
  let out = Sys.argv.(1) in
  ignore (Gc.Memprof.start ~sampling_rate:1e-2 tracker);
  ignore (churn 100_000);
  (match Flamme.start ~output:out ~alloc:1e-3 () with
   | () ->
       print_endline "accepted";
       Flamme.stop ()
   | exception Flamme.Error msg -> print_endline ("refused: " ^ msg));
  let before = Atomic.get own in
  ignore (churn 1_000_000);
  Printf.printf "own samples after: %d\n" (Atomic.get own - before);
  Gc.Memprof.stop ()
